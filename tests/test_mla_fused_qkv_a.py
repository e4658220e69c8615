"""DeepSeek-V3/R1's two MLA down-projections run as one GEMM (components/models/layers.py): SGLang's
`fused_qkv_a_proj_with_mqa`, vLLM's `fused_qkv_a_proj`, TensorRT-LLM's `kv_a_proj_with_mqa`, each of
n = q_lora_rank + kv_lora_rank + qk_rope_head_dim = 1536 + 512 + 64 = 2112 over k = d_model = 7168,
replicated on every chip. Worked by hand."""

from __future__ import annotations

from conftest import compose_cfg
from decodelab.core.build import build
from decodelab.opcost import gemm
from decodelab.paths import DATA_DIR

R1_FP8 = (
    "model=deepseek_r1",
    "hardware=b200_sxm",
    "hardware.n_chips=8",
    "hardware.tensor_parallel=8",
    "workload.weight_dtype=fp8_block",
)


def test_deepseek_runs_one_down_projection_gemm_by_hand():
    """FP8 weights (1 B): 7168 x 2112 = 15,138,816 B, replicated at TP8; 2 x 7168 x 2112 = 30,277,632 FLOPs
    per token; one op per layer (61 layers), and neither half as an op of its own."""
    ops = {op.name: op for op in build(compose_cfg(*R1_FP8)).ops}
    assert "q_a_proj" not in ops and "kv_a_proj" not in ops
    op = ops["qkv_a_proj"]
    assert op.weight_bytes == 15_138_816 and op.flops_per_token == 30_277_632 and op.repeat == 61


def test_the_fused_gemm_costs_less_than_its_two_halves_in_the_b200_sglang_table():
    """AIConfigurator's B200 SGLang 0.5.9 fp8_block table (shipped parquet) at 4 tokens: the two halves
    (n 1536, 576) take 33.9 + 22.1 us, the one GEMM (n 2112, interpolated in log n between the
    table's neighbouring n) about 35 us: one fixed cost per call is saved, ~21 us a layer."""
    path = str(DATA_DIR / "operators" / "b200_sxm_gemm_sglang_0.5.9.parquet")

    def at4(n):
        ms, ts = gemm.curve(path, "fp8_block", n, 7168)
        return float(ts[list(ms).index(4)]) * 1e6

    assert round(at4(1536), 1) == 33.9 and round(at4(576), 1) == 22.1
    assert 34.0 < at4(2112) < 36.0 and at4(1536) + at4(576) - at4(2112) > 20.0
