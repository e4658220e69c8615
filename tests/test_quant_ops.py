"""Precision as the checkpoint and the engine run it (issue 39 item 4): the ops a quantized checkpoint
leaves in BF16 (model.quant_bf16_ops, components/ops.py keep_bf16), worked by hand on DeepSeek-R1's
NVFP4 checkpoints, and the MoE kernel an engine's backend picks where a table times several
(engine.moe_backend, framework/opcost/moe_blocks.py kernel_rows)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg, moe_kernel_table
from decodelab.core.build import build
from decodelab.core.cost_setup import moe_backend
from decodelab.errors import ConfigError
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import moe_blocks
from decodelab.paths import DATA_DIR

R1_FP4 = ("model=deepseek_r1", "hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
V2 = "model.quant_bf16_ops.nvfp4=[qkv_a_proj,q_b_proj,q_absorb,v_absorb,kv_b_decompress]"


def _ops(*overrides):
    return {op.name: op for op in build(compose_cfg(*R1_FP4, *overrides)).ops}


def test_nvfp4_deepseek_keeps_its_mla_projections_in_bf16_by_hand():
    """nvidia/DeepSeek-R1-FP4 (conf/model/deepseek_r1.yaml): every MLA projection BF16, the experts NVFP4.
    Per chip at TP8 (16 of 128 heads): o_proj 16 x 128 x 7168 x 2 B = 29,360,128 B; qkv_a_proj (q_a and kv_a as
    one GEMM) replicated 7168 x 2112 x 2 = 30,277,632 B; q_absorb 16 x 128 x 512 x 2 = 2,097,152 B. The -v2 checkpoint quantizes
    o_proj: 16 x 128 x 7168 x 0.5625 B = 8,257,536 B. FP8 weights: no key, every op FP8 (1 B)."""
    ops = _ops("workload.weight_dtype=nvfp4")
    assert ops["o_proj"].weight_bytes == 29_360_128 and ops["o_proj"].gemm_dtype == "bf16"
    assert ops["qkv_a_proj"].weight_bytes == 30_277_632 and ops["qkv_a_proj"].gemm_dtype == "bf16"
    assert ops["q_absorb"].weight_bytes == 2_097_152 and ops["q_absorb"].gemm_dtype == "bf16"
    assert ops["kv_b_decompress"].resident_bytes == 0.0  # held once, by the absorbed ops
    assert ops["gate_up_proj"].gemm_dtype == "" and ops["lm_head"].gemm_dtype == "bf16"
    v2 = _ops("workload.weight_dtype=nvfp4", V2)
    assert v2["o_proj"].weight_bytes == 8_257_536 and v2["o_proj"].gemm_dtype == ""
    assert v2["qkv_a_proj"].weight_bytes == 30_277_632
    fp8 = _ops("workload.weight_dtype=fp8_block")
    assert fp8["o_proj"].weight_bytes == 14_680_064 and fp8["o_proj"].gemm_dtype == ""


def test_an_op_the_design_lacks_is_one_error_line():
    with pytest.raises(ConfigError, match="quant_bf16_ops names q_proj"):
        _ops("workload.weight_dtype=nvfp4", "model.quant_bf16_ops.nvfp4=[q_proj]")


@pytest.fixture
def two_kernels(tmp_path):
    """One block timed by both kernels (CUTLASS 2 ms, TRTLLM-gen 1 ms at every count), one by CUTLASS only."""
    kernels = ((1, {"moe_torch_flow_cutlass": 2.0, "moe_torch_flow_min_latency": 1.0}),
               (2, {"moe_torch_flow_cutlass": 3.0}))  # fmt: skip
    return moe_kernel_table(tmp_path / "moe.csv", "nvfp4", kernels)


def test_the_backend_picks_its_kernel_and_keeps_blocks_it_did_not_measure(two_kernels):
    block, only_cutlass = (1024, 512, 2, 8, 1, 1), (1024, 512, 2, 8, 1, 2)
    at = {b: moe_blocks.block_row(two_kernels, "nvfp4", block, b)[0] for b in ("", "trtllm", "cutlass")}
    assert at == pytest.approx({"": 1.5e-3, "trtllm": 1.0e-3, "cutlass": 2.0e-3})  # "": the median
    assert moe_blocks.block_row(two_kernels, "nvfp4", only_cutlass, "trtllm")[0] == pytest.approx(3.0e-3)


def test_shipped_b200_deepseek_block_by_kernel():
    """AIConfigurator B200 1.2.0rc5 nvfp4, DeepSeek's block (7168, 2048, top-8 of 256) at moe_ep 8, one
    token: TRTLLM-gen 41.952 us, CUTLASS 62.075 us (the source rows); the shipped median was their mean."""
    path = str(DATA_DIR / "operators" / "b200_sxm_moe_trtllm_1.2.0rc5_mxfp4_1.3.0rc10.parquet")
    shape = (7168, 2048, 8, 256, 1, 8)
    assert M_GRID[0] == 1
    assert moe_blocks.block_row(path, "nvfp4", shape, "trtllm")[0] == pytest.approx(41.952e-6, rel=1e-4)
    assert moe_blocks.block_row(path, "nvfp4", shape, "cutlass")[0] == pytest.approx(62.075e-6, rel=1e-4)
    assert moe_blocks.block_row(path, "nvfp4", shape, "")[0] == pytest.approx(52.0135e-6, rel=1e-4)


def test_engine_files_name_the_backend_attention_dp_switches_it():
    """TensorRT-LLM's default CUTLASS; InferenceX's DeepSeek launch TRTLLM, CUTLASS under attention DP."""
    base = ("model=deepseek_r1", "hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
    assert moe_backend(compose_cfg(*base)) == "cutlass"
    assert moe_backend(compose_cfg(*base, "engine=trtllm_inferencex")) == "trtllm"
    assert moe_backend(compose_cfg(*base, "engine=trtllm_inferencex", "hardware.attention_dp=8")) == "cutlass"
