"""Block-scaled FP8 dense GEMMs under the kernel a launch runs (engine.gemm_backend_fp8_block, issue 39):
SGLang's own table times DeepGEMM; a launch that turns DeepGEMM off on Blackwell runs FlashInfer's TRTLLM
GEMM, costed from the chip's table (TensorRT-LLM's measured kernels) for block-scaled FP8 only
(framework/opcost/gemm.py gemm_tables; aic_mapping.yaml launches and disagg_recipes.gemm_backend_fp8_block)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.core.cost_setup import cost_context
from decodelab.errors import ConfigError
from decodelab.opcost import gemm
from decodelab.paths import DATA_DIR
from decodelab.runs import aic_recipes

SGL = "operators/b200_sxm_gemm_sglang_0.5.9.parquet"
TRT = "operators/b200_sxm_gemm_trtllm_1.2.0rc5.parquet"
DSV3 = ("model=deepseek_v3", "hardware=b200_sxm", "engine=sglang_0_5_8", "workload.weight_dtype=fp8_block")


def ctx_of(*overrides):
    return cost_context(compose_cfg(*DSV3, *overrides))


def test_trtllm_reads_the_chips_table_for_fp8_block_only():
    """Default: SGLang's table, then the chip's, for every dtype. trtllm: the chip's table alone for
    block-scaled FP8; BF16 GEMMs (the router, the LM head) keep SGLang's."""
    own, fi = ctx_of(), ctx_of("engine.gemm_backend_fp8_block=trtllm")
    assert gemm.gemm_tables(own, "fp8_block") == [SGL, TRT]
    assert gemm.gemm_tables(fi, "fp8_block") == [TRT]
    assert gemm.gemm_tables(fi, "bf16") == [SGL, TRT]


def test_a_deepseek_projection_at_eight_tokens():
    """n 2048, k 7168 (a grid shape) at 1-8 tokens, block-scaled FP8, B200: SGLang's DeepGEMM rows
    (AIConfigurator @095f58a5 b200_sxm/gemm/sglang/0.5.9: 37.2, 34.9, 34.6 us at m 1, 4, 8 and 31.3 us at
    m 16) made non-decreasing in m read 28.188 us; TensorRT-LLM's (1.2.0rc5: 25.3, 25.9, 24.7, 23.5 us)
    18.141 us; the BF16 GEMM of the shape ~9 us in both."""
    at = {
        name: gemm.measured_row(str(DATA_DIR / path), "fp8_block", 2048, 7168)[:8]
        for name, path in (("sglang", SGL), ("trtllm", TRT))
    }
    assert at["sglang"] == pytest.approx([28.188e-6] * 8, rel=1e-4)
    assert at["trtllm"] == pytest.approx([18.141e-6] * 8, rel=1e-4)


def test_a_bad_value_is_one_error_line():
    with pytest.raises(ConfigError, match=r"engine.gemm_backend_fp8_block='deepgemm' is not one of: trtllm"):
        ctx_of("engine.gemm_backend_fp8_block=deepgemm")


def recipe(path, dp_attn=False):
    return {"config_file": path, "decode": {"dp_attn": dp_attn}}


@pytest.mark.parametrize(
    "path, dp_attn, stated",
    [
        ("recipes/b200-fp8/1k1k/stp/low-latency-tep8-1p1d.yaml", False, "trtllm"),
        ("recipes/b200-fp8/8k1k/mtp/max-tpt-dep8-1p1d.yaml", True, "trtllm"),
        ("recipes/gb200-fp8/1k1k/low-latency.yaml", False, "trtllm"),
        ("recipes/b200-fp8/8k1k_stp_lowlat_2.yaml", False, None),  # DeepGEMM left on
        ("recipes/h200/1k1k/low-latency-1p9d.yaml", False, None),
    ],
)
def test_each_recipe_states_its_pools_gemm_kernel(path, dp_attn, stated):
    """SGLANG_ENABLE_JIT_DEEPGEMM "false" in both pools of qiching/srt-slurm @5063eb43's b200-fp8/{1k1k,8k1k}/
    files and the GB200 low-latency files: trtllm in both pools; the 8k1k_*_N.yaml files (@4a22a181) and the
    Hopper files leave DeepGEMM on: not stated (the engine's)."""
    got = aic_recipes.pool_backends([recipe(path, dp_attn)])
    want = {} if stated is None else {f"{s}_gemm_backend_fp8_block": stated for s in ("prefill", "decode")}
    assert {k: v for k, v in got.items() if k.endswith("gemm_backend_fp8_block")} == want


def test_recipes_that_differ_state_none():
    """A row matched by a file that turns DeepGEMM off and one that leaves it on: the engine's kernel."""
    got = aic_recipes.pool_backends(
        [
            recipe("recipes/b200-fp8/8k1k/stp/low-latency-tep8-1p1d.yaml"),
            recipe("recipes/b200-fp8/8k1k_stp_lowlat_2.yaml"),
        ]
    )
    assert not any(k.endswith("gemm_backend_fp8_block") for k in got)


def test_the_design_notes_the_table_its_fp8_gemms_read():
    """A block-scaled FP8 design under trtllm says which table its GEMMs read; the engine's own kernel, or
    BF16 weights, say nothing."""
    want = (
        "engine.gemm_backend_fp8_block=trtllm: block-scaled FP8 GEMMs read hardware.op_tables.gemm "
        f"({TRT}), not sglang's table"
    )
    assert gemm.note(ctx_of("engine.gemm_backend_fp8_block=trtllm")) == want
    assert gemm.note(ctx_of()) is None
    bf16 = cost_context(
        compose_cfg(*DSV3[:3], "workload.weight_dtype=bf16", "engine.gemm_backend_fp8_block=trtllm")
    )
    assert gemm.note(bf16) is None
