"""Rows recorded with experts split by tensor parallelism whose launch enabled expert parallelism
(framework/data/validation/aic_mapping.yaml `expert_parallel_launched`; framework/runs/aic_parallel.py
ep_launched): InferenceX's minimaxm2.5_fp8_{b200,h200}.sh tested `[ "$EP_SIZE" -ge 1 ]`, so the vLLM
0.17.0 B200 and 0.18.0 H200 MiniMax-M2.5 runs passed --enable-expert-parallel though EP_SIZE was 1; its
gptoss_fp4_h200_trt_slurm.sh of 2025-11 passed --ep_size=$TP to TensorRT-LLM."""

import pandas as pd
import pytest

MINIMAX = "MiniMaxAI/MiniMax-M2.5"
SRC = "source_file=2026-03-25.csv; model=MiniMax-M2.5; silicon_concurrency=16; wip=False"


def _row(version, system, tp, adp, mtp, mep, src=SRC, mode="agg", model=MINIMAX):
    return pd.Series(
        dict(silicon_data_source=src, backend="vllm", backend_version=version, model_path=model, system=system,
             mode=mode, batch_size="16", tp_size=str(tp), pp_size="1", attention_dp_size=str(adp),
             moe_tp_size=str(mtp), moe_ep_size=str(mep))
    )  # fmt: skip


@pytest.mark.parametrize(
    "version, system, cols, split",
    [
        ("0.18.0", "h200_sxm", (8, 1, 8, 1), (8, 1, 1, 8)),  # recorded moe 8 x 1, ran EP8
        ("0.17.0", "b200_sxm", (2, 1, 2, 1), (2, 1, 1, 2)),  # recorded moe 2 x 1, ran EP2
        ("0.17.0", "b200_sxm", (4, 1, 4, 1), (4, 1, 1, 4)),
        ("0.16.0", "h200_sxm", (4, 1, 4, 1), None),  # the 2026-03-01 script passed no EP flag
        ("0.19.0", "b200_sxm", (2, 1, 2, 1), None),  # `-gt 1` from PR #947: as recorded
        ("0.18.0", "h100_sxm", (4, 1, 1, 4), None),  # no entry (and already EP)
        ("0.18.0", "h200_sxm", (8, 1, 1, 8), None),  # not the moe_tp = tp_size signature
    ],
)
def test_launch_with_expert_parallel(version, system, cols, split):
    from decodelab.runs import aic_parallel, aic_rows

    row = _row(version, system, *cols)
    assert aic_parallel.launched(row) == split
    par, why = aic_rows.parallel_of(row, "minimax_m2_5", system)
    want = split or (cols[0], cols[1], cols[2], cols[3])
    assert why == "" and (par["tp"], par["dp"], par["moe_tp"], par["moe_ep"]) == want


def test_only_aggregated_minimax_rows():
    from decodelab.runs import aic_parallel

    assert aic_parallel.ep_launched(_row("0.18.0", "h200_sxm", 8, 1, 8, 1, mode="disagg")) is None
    assert (
        aic_parallel.ep_launched(_row("0.18.0", "h200_sxm", 8, 1, 8, 1, model="openai/gpt-oss-120b")) is None
    )


def test_twice_counting_dump_row_falls_back_to_the_launch():
    """A B200 0.17.0 row of the 2026-04-06 dump (which counts EP twice where it ran EP) records tp 2 x
    moe 2 x 1: not the twice-counted signature, so the launch rule decides it (EP2 on its 2 GPUs)."""
    from decodelab.runs import aic_parallel

    row = _row("0.17.0", "b200_sxm", 2, 1, 2, 1, src="source_file=2026-04-06.csv; silicon_concurrency=16")
    assert aic_parallel.counted_twice(row) and aic_parallel.twice_counted(row) is None
    assert aic_parallel.launched(row) == (2, 1, 1, 2)


@pytest.mark.parametrize(
    "measured, cols, split",
    [
        ("2025-11-02", (8, 1, 8, 1), (8, 1, 1, 8)),  # `--ep_size=$TP` in the 2025-11-01 script: EP8
        ("2025-11-02", (2, 1, 2, 1), (2, 1, 1, 2)),
        ("2025-12-15", (4, 1, 4, 1), None),  # another date: as recorded
    ],
)
def test_trtllm_gpt_oss_h200_rows_of_2025_11_02_ran_ep_equal_tp(measured, cols, split):
    """InferenceX's gptoss_fp4_h200_trt_slurm.sh @e06929c70 launched trtllm-serve --tp_size=$TP --ep_size=$TP;
    the rows of its 2025-11-02 run (no backend_version) record moe_tp_size = tp_size, moe_ep_size 1."""
    from decodelab.runs import aic_parallel

    src = f"source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=8; measured={measured}T00:00:00.000Z"
    row = _row("", "h200_sxm", *cols, src=src, model="openai/gpt-oss-120b")
    row["backend"] = "trtllm"
    assert aic_parallel.launched(row) == split


@pytest.mark.parametrize(
    "measured, split",
    [("2025-11-02", (8, 1, 1, 8)), ("2025-11-10", (8, 1, 1, 8)), ("2025-11-18", None)],
)
def test_sglang_fp4_b200_rows_of_2025_11_ran_ep_equal_tp(measured, split):
    """InferenceX's dsr1_fp4_b200_docker.sh @4b860b78e passed --enable-ep-moe (SGLang: ep_size = tp_size); the rows
    of 2025-11-02 and 2025-11-10 (no backend_version) record moe_tp_size = tp_size, moe_ep_size 1."""
    from decodelab.runs import aic_parallel

    src = f"source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=8; measured={measured}T00:00:00.000Z"
    row = _row("", "b200_sxm", 8, 1, 8, 1, src=src, model="deepseek-ai/DeepSeek-R1")
    row["backend"], row["precision"] = "sglang", "fp4"
    assert aic_parallel.launched(row) == split
