"""InferenceX's SGLang B200 DeepSeek launches pass --enable-flashinfer-allreduce-fusion: each layer's all-reduce
carries the residual add and the next RMSNorm (framework/data/validation/aic_mapping.yaml, the three
inferencex-sglang-dsr1-b200 entries; components/models/dense.py norm_ops). Worked by hand on the design."""

from __future__ import annotations

import pandas as pd
from conftest import compose_cfg, inferencex_source, silicon_row
from decodelab.core.build import build
from decodelab.runs import aic_launches

FLAG = "engine.allreduce_norm=true"


def ds_row(**cells) -> pd.Series:
    source = inferencex_source("DeepSeek-R1", 4, "2026-03-25T16:34:14Z", "lmsysorg/sglang:v0.5.9-cu130")
    cells = {"precision": "fp8", "tp_size": 8, **cells}
    who = {"backend": "sglang", "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-R1-0528"}
    return silicon_row(source, **{**who, **cells})


def test_every_b200_sglang_deepseek_launch_fuses_the_norms():
    for cells in ({}, {"tp_size": 4}, {"precision": "fp4"}, {"backend_version": ""}):
        got = aic_launches.launch_of(ds_row(**cells))
        assert got["launch"].startswith("inferencex-sglang-dsr1-b200"), got["launch"]
        assert got["launch_overrides"][0] == FLAG
    h200 = aic_launches.launch_of(ds_row(system="h200_sxm"))  # dsr1_fp8_h200.sh: no fusion flag
    assert FLAG not in h200["launch_overrides"]


def test_the_fused_design_drops_the_norm_kernels_by_hand():
    """DeepSeek-R1 at TP8 under SGLang: without the flag each layer runs an input RMSNorm and a post-attention
    residual add + RMSNorm of its own; with it both ride in the two all-reduces (no norm op outside them)."""
    base = (
        "model=deepseek_r1",
        "engine=sglang_0_5_8",
        "hardware=b200_sxm",
        "hardware.n_chips=8",
        "hardware.tensor_parallel=8",
        "workload.weight_dtype=fp8_block",
    )
    plain = {op.name for op in build(compose_cfg(*base)).ops}
    fused = {op.name for op in build(compose_cfg(*base, FLAG)).ops}
    assert {"input_norm", "residual_norm"} <= plain
    assert not {"input_norm", "residual_norm"} & fused
    assert {"attn_allreduce", "mlp_allreduce", "qkv_a_proj"} <= fused
