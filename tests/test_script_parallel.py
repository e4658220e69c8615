"""Rows whose launch script chose expert and attention-DP parallelism itself (framework/data/validation/
aic_mapping.yaml `script_parallel`; framework/runs/aic_parallel.py script_split): InferenceX's 2025-11-02
TensorRT-LLM DeepSeek runs (dsr1_{fp4_b200,fp8_b200,fp8_h200}_trt_slurm.sh @9596d23d7), recorded with tp only."""

from __future__ import annotations

import pandas as pd
import pytest
from decodelab.runs import aic_parallel, aic_rows


def _row(system, precision, tp, isl, osl, clients, measured="2025-11-02"):
    src = f"source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency={clients}; measured={measured}T00:00:00.000Z"
    return pd.Series(
        dict(silicon_data_source=src, backend="trtllm", backend_version="", model_path="deepseek-ai/DeepSeek-R1",
             system=system, precision=precision, mode="agg", isl=str(isl), osl=str(osl), batch_size=str(clients),
             tp_size=str(tp), pp_size="1", attention_dp_size="", moe_tp_size=str(tp), moe_ep_size="1")
    )  # fmt: skip


@pytest.mark.parametrize(
    "system, precision, tp, isl, osl, clients, split",
    [
        ("b200_sxm", "fp4", 8, 1024, 1024, 8, None),  # TP8 1k1k: EP above 8 clients
        ("b200_sxm", "fp4", 8, 1024, 1024, 16, (8, 1, 1, 8)),
        ("b200_sxm", "fp4", 8, 1024, 8192, 16, None),  # 1k8k: above 16
        ("b200_sxm", "fp4", 8, 1024, 8192, 256, (1, 8, 1, 8)),  # attention DP from 256 clients
        ("b200_sxm", "fp4", 4, 8192, 1024, 32, None),  # 8k1k: EP and DP above 32
        ("b200_sxm", "fp4", 4, 8192, 1024, 64, (1, 4, 1, 4)),
        ("b200_sxm", "fp4", 4, 1024, 1024, 64, (4, 1, 1, 4)),
        ("b200_sxm", "fp8", 8, 1024, 1024, 16, (8, 1, 1, 8)),  # FP8: EP_SIZE=$TP always
        ("b200_sxm", "fp8", 8, 1024, 1024, 64, (1, 8, 1, 8)),  # DP above 32 at 1k1k
        ("h200_sxm", "fp8", 8, 8192, 1024, 64, (1, 8, 1, 8)),  # DP above 32 at 8k1k
        ("h200_sxm", "fp8", 8, 1024, 1024, 64, (8, 1, 1, 8)),  # ... above 64 at 1k1k
    ],
)
def test_the_scripts_rules(system, precision, tp, isl, osl, clients, split):
    row = _row(system, precision, tp, isl, osl, clients)
    assert aic_parallel.launched(row) == split
    par, why = aic_rows.parallel_of(row, "deepseek_r1", system)
    want = split or (tp, 1, tp, 1)
    assert why == "" and (par["tp"], par["dp"], par["moe_tp"], par["moe_ep"]) == want
    assert aic_rows.concurrency_of(row) == (clients, "")


def test_other_dates_run_as_recorded():
    assert (
        aic_parallel.script_split(_row("h200_sxm", "fp8", 8, 1024, 1024, 16, measured="2025-12-15")) is None
    )
