"""The MoE kernel vLLM and SGLang run for block-scaled FP8 on B200 (issue 39): vLLM 0.17-0.19's fp8 oracle picks
FlashInfer's TRTLLM-gen kernel on SM100 (conf/engine/vllm_0_19.yaml moe_backend_fp8_block), a launch that removed
FlashInfer keeps Triton; InferenceX's SGLang B200 FP8 launches pass --moe-runner-backend flashinfer_trtllm
(aic_mapping.yaml). The borrowed rows (tools/aic_moe_kernel_convert.py BORROWS) are read only under trtllm."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.core.cost_setup import moe_backend
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import moe_blocks
from decodelab.paths import DATA_DIR

OPS = DATA_DIR / "operators"


def _at(path, shape, backend, counts=(1, 4, 8)):
    row = moe_blocks.block_row(str(path), "fp8_block", shape, backend)
    return {n: row[M_GRID.index(n)] for n in counts}


@pytest.mark.parametrize(
    "table, shape, trtllm, triton",
    [
        # MiniMax-M2.5's block (3072, 1536, top-8 of 256) at moe_tp 2: under trtllm AIConfigurator @095f58a5
        # systems/data/b200_sxm/moe/vllm/0.24.0 (balanced, vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic,
        # one row per count); under triton and "" the 0.19.0 table's Triton fused_experts rows, as before the
        # borrowed rows were added
        ("b200_sxm_moe_vllm_0.19.0.parquet", (3072, 1536, 8, 256, 2, 1),
         (31.344e-6, 62.139e-6, 97.349e-6), (39.749e-6, 70.901e-6, 119.600e-6)),
        # DeepSeek's block (7168, 2048, top-8 of 256) at moe_tp 8 in B200's SGLang 0.5.9 table: under trtllm the
        # SGLang 0.5.14 flashinfer_trtllm rows (the same source rows as the TensorRT-LLM table's); under "" and
        # triton 0.5.9's Triton fused MoE
        ("b200_sxm_moe_sglang_0.5.9.parquet", (7168, 2048, 8, 256, 8, 1),
         (36.127e-6, 41.718e-6, 57.212e-6), (50.897e-6, 87.249e-6, 127.940e-6)),
    ],
)  # fmt: skip
def test_b200_fp8_block_by_backend(table, shape, trtllm, triton):
    """Seconds of the block at 1 / 4 / 8 tokens per MoE backend: the borrowed TRTLLM-gen rows only under
    trtllm."""
    path = OPS / table
    assert _at(path, shape, "trtllm") == pytest.approx(dict(zip((1, 4, 8), trtllm)), rel=1e-4)
    for backend in ("triton", ""):
        assert _at(path, shape, backend) == pytest.approx(dict(zip((1, 4, 8), triton)), rel=1e-4)


def test_vllm_0_19_fp8_block_backend_by_chip_and_launch():
    """vllm_0_19: trtllm for block FP8 on a B200, "" on an H200 (the Hopper rule), NVFP4 untouched; the
    0.17.0 launch's override (VLLM_USE_FLASHINFER_MOE_FP8=0) gives triton."""
    base = ("model=minimax_m2_5", "hardware.n_chips=2", "hardware.tensor_parallel=2", "engine=vllm_0_19")
    fp8 = "workload.weight_dtype=fp8_block"
    assert moe_backend(compose_cfg(*base, "hardware=b200_sxm", fp8)) == "trtllm"
    assert moe_backend(compose_cfg(*base, "hardware=h200_sxm", fp8)) == ""
    assert moe_backend(compose_cfg(*base, "hardware=b200_sxm", "workload.weight_dtype=nvfp4")) == ""
    forced = "engine.moe_backend_fp8_block=triton"
    assert moe_backend(compose_cfg(*base, "hardware=b200_sxm", fp8, forced)) == "triton"
