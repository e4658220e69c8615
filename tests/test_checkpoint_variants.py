"""Checkpoints that reuse an architecture decodelab models (conf/model files imported from their public
config.json, AIConfigurator's copies @095f58a5): vision-language checkpoints run as their language model
(text prompts), MiniMax-M2.7 and Kimi-K2.6 / K2.7 as the shapes they share with M2.5 and K2.5, and a
Kimi-K2.5 INT4 row with only its routed experts in 4 bits."""

import pytest
from decodelab.components.models.layers import param_counts
from decodelab.config.compose import compose, context
from decodelab.core.build import build
from decodelab.core.checks import DTYPE_BYTES, check_feasible
from decodelab.errors import Infeasible
from decodelab.runs import aic_rows
from decodelab.runs.validation import PRECISIONS

from tests.test_validation_aic import agg, frame


@pytest.mark.parametrize(
    "model_id,name",
    [
        ("Qwen/Qwen3-VL-235B-A22B-Instruct", "qwen3_vl_235b_a22b"),
        ("Qwen/Qwen3-VL-32B-Thinking", "qwen3_vl_32b"),
        ("Qwen/Qwen3-VL-30B-A3B-Instruct-FP8", "qwen3_vl_30b_a3b"),
        ("Qwen/Qwen3-VL-2B-Instruct", "qwen3_vl_2b"),
        ("MiniMaxAI/MiniMax-M2.7", "minimax_m2_7"),
        ("nvidia/MiniMax-M2.7-NVFP4", "minimax_m2_7"),
        ("nvidia/Kimi-K2.6-NVFP4", "kimi_k2_6"),
        ("nvidia/Kimi-K2.7-Code-NVFP4", "kimi_k2_7_code"),
        ("stepfun-ai/Step-3.7-Flash-FP8", "step_3_7_flash"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_scout_17b_16e"),
    ],
)
def test_checkpoint_names_find_their_model_file(model_id, name):
    assert aic_rows.model_of(model_id) == (name, "")


def _design(model, dtype="bf16"):
    """The design of eight B200s (Kimi does not fit one)."""
    with context():
        cfg = compose(
            [f"model={model}", "hardware=b200_sxm", "hardware.n_chips=8", f"workload.weight_dtype={dtype}"]
        )
    return build(cfg)


def test_a_vision_language_checkpoint_is_its_language_model():
    """Qwen3-VL-32B's text_config has Qwen3-32B's shapes (64 layers, d 5120, 64 / 8 heads of 128, FFN 25600,
    q/k norm, untied 151,936 vocabulary): the same weights, 32.76B parameters at 2 B, and the same step."""
    vl, lm = _design("qwen3_vl_32b"), _design("qwen3_32b")
    assert vl.weight_bytes_total == pytest.approx(lm.weight_bytes_total, rel=1e-12)
    assert vl.weight_bytes_total == pytest.approx(2 * 32.76e9, rel=2e-3)


def test_a_vl_row_runs_and_an_int4_kimi_row_is_w4a16(tmp_path):
    df = frame(
        tmp_path,
        agg(model="Qwen/Qwen3-VL-32B-Instruct", prec=""),
        agg(model="moonshotai/Kimi-K2.5", prec="int4", tp=8, moe="8,1", system="b200_sxm"),
    )
    assert list(df.refuse) == ["", ""]
    assert PRECISIONS["int4"] == ("int4", "bf16")


def test_kimi_int4_holds_only_the_routed_experts_in_four_bits():
    """Kimi-K2.5 W4A16 (expert_only_dtypes [int4]): the fused q_a + kv_a projection, replicated on every
    chip, keeps 2 B per weight, 7168 x (1536 + 512 + 64) x 2 = 30,277,632 B a layer. The gate/up GEMM at TP8,
    a layer's average over 1 dense and 60 MoE layers: the dense layer's 7168 x 2 x 2304 and the shared
    expert's 7168 x 2 x 256 weights stay BF16, (33,030,144 / 61 + 60 / 61 x 3,670,016) x 2 = 8,302,659 B, and
    the 384 routed experts' 60 / 61 x 384 x 3,670,016 weights take 0.5 B: 693,091,546 B."""
    int4, fp8 = _design("kimi_k2_5", "int4"), _design("kimi_k2_5", "fp8")
    ops4, ops8 = ({o.name: o for o in d.ops} for d in (int4, fp8))
    assert ops4["qkv_a_proj"].weight_bytes == 7168 * (1536 + 512 + 64) * 2
    assert ops4["qkv_a_proj"].weight_bytes == 2 * ops8["qkv_a_proj"].weight_bytes
    always, routed = 33_030_144 / 61 + 60 / 61 * 3_670_016, 60 / 61 * 384 * 3_670_016
    assert ops4["gate_up_proj"].resident_bytes == pytest.approx(2 * always + 0.5 * routed, rel=1e-9)
    assert ops8["gate_up_proj"].resident_bytes == pytest.approx(always + routed, rel=1e-9)
    assert 2 * always + 0.5 * routed == pytest.approx(8_302_659 + 693_091_546, abs=1.0)
    # nvidia's Kimi-K2.6 NVFP4 export leaves the same layer 0, shared experts and attention BF16
    ops = {o.name: o for o in _design("kimi_k2_6", "nvfp4").ops}
    assert ops["qkv_a_proj"].weight_bytes == 7168 * (1536 + 512 + 64) * 2
    nvfp4 = DTYPE_BYTES["nvfp4"]
    assert ops["gate_up_proj"].resident_bytes == pytest.approx(2 * always + nvfp4 * routed, rel=1e-9)


def test_llama4_scout_has_its_model_cards_parameters():
    """Llama-4-Scout by hand: a layer holds attention 5120 x 5120 (q) + 2 x 5120 x 1024 (k, v) + 5120 x 5120 (o)
    = 62.91M, 16 routed experts and one shared expert of 3 x 5120 x 8192 = 125.83M each and a 5120 x 16
    router: 2,201.8M; 48 layers + untied 202,048 x 5120 embedding and head (2.069B) = 107.77B (model card:
    109B with the vision tower). Active: attention, one routed and the shared expert, 314.6M a layer,
    + embedding and head = 17.17B (model card: 17B)."""
    with context():
        m = compose(["model=llama4_scout_17b_16e"]).model
    p = param_counts(m)
    layer = 62.91e6 + 17 * 125.83e6 + 5120 * 16
    assert p["total"] == pytest.approx(48 * layer + 2.069e9, rel=1e-3)
    assert p["active"] == pytest.approx(48 * (62.91e6 + 2 * 125.83e6) + 2.069e9, rel=1e-3)


def test_data_parallel_attention_and_whole_experts_need_no_head_or_column_split():
    """DeepSeek-R1 over 48 GPUs of attention DP 48 and 48-way expert parallelism (a GB200 DEP48 decode pool):
    each chip keeps all 128 heads and whole experts, so 48, which divides neither 128 heads nor the experts'
    2048 columns, is no reason to refuse; tensor-parallel attention over 48 chips is."""
    base = ["model=deepseek_r1", "hardware=gb200", "hardware.n_chips=48", "workload.weight_dtype=nvfp4"]
    with context():
        dp = compose(base + ["hardware.attention_dp=48", "hardware.moe_mapping=ep"])
        tp = compose(base)
    check_feasible(dp)
    with pytest.raises(Infeasible, match="tensor_parallel=48 does not divide n_heads=128"):
        check_feasible(tp)
