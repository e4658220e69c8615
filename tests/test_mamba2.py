"""Mamba-2 hybrids (components/models/linear_attn.py, linear_kind mamba2) and layers without an FFN block
(model.ffn_free_layers): NVIDIA Nemotron 3 Nano 30B-A3B (config.json: d 2688, 52 blocks = 23 Mamba-2 +
23 MoE + 6 attention; 8 groups of state 128, 64 heads of 64, conv 4; 32 query / 2 KV heads of 128; 128
experts top-6 of 1856 + a shared MLP of 3712, squared ReLU) and Nemotron-H 56B. Every figure below is
worked out by hand in its comment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_import_matches_shipped, assert_serve_matches_reference
from decodelab.components.models import layers, linear_attn
from decodelab.config import hf_model
from decodelab.core import kv_costs, profile_reserve
from decodelab.core.build import build
from decodelab.errors import ConfigError
from decodelab.modes.serving import engine_vector as EV
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng
from decodelab.modes.serving.parts import kv_blocks
from decodelab.runs.aic_rows import model_of
from decodelab.runs.validation import run_validation

NANO = "model=nemotron_3_nano_30b_a3b"
CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _ops(compose, tp=2):
    m = compose(NANO).model
    return m, {op.name: op for op in layers.build_ops(m, tp, 1.0, 2.0, 1.0, tokens_per_step=64)}


def test_one_mamba2_layer_at_tp2(compose):
    """tp 2: 8 / 2 = 4 groups and 64 / 2 = 32 heads a chip; H P = 32 x 64 = 2,048; conv_dim = 2 x 4 x 128
    + 2,048 = 3,072; in_proj d -> z + x B C + dt = 2,048 + 3,072 + 32 = 5,152 outputs; 1-byte weights,
    BF16 activations."""
    m, ops = _ops(compose)
    assert linear_attn.n_linear(m) == 23 and ops["in_proj"].repeat == 23
    assert ops["in_proj"].gemm_n == 5152 and ops["in_proj"].weight_bytes == 2688 * 5152  # 13,848,576
    assert ops["out_proj"].flops_per_token == 2 * 2048 * 2688
    assert "in_proj_z" not in ops and "gdn_decode" not in ops  # not the Gated DeltaNet's ops
    # state: 32 heads x 128 x 64 x 4 B (fp32) = 1,048,576 B; conv state 3 x 3,072 x 2 B = 18,432 B
    dec = ops["ssm_decode"]
    assert dec.path == "decode" and dec.state_bytes_per_seq == 1_048_576 + 18_432
    # decode bytes: x, z, B, C, dt in ((2 x 2,048 + 2 x 4 x 128 + 32) x 2 = 10,304) and y out (4,096),
    # the state read and written (2,097,152): 2,111,552; FLOPs 32 x 6 x 128 x 64 + 2 x 2,048 = 1,576,960
    assert dec.act_bytes_per_token == 2_111_552 and dec.flops_per_token == 1_576_960
    # prefill per token and head (C = 128, G / H = 4 / 32): 2 x 128 x 128 / 8 + 2 x 128 x 64 + 4 x 128 x 64
    # = 4,096 + 16,384 + 32,768 = 53,248 FLOPs; bytes (3 x 64 + 2 x 128 / 8) x 2 + 8 x 128 x 64 / 128 = 960
    pre = ops["ssm_prefill"]
    assert pre.path == "prefill" and pre.flops_per_token == 32 * 53_248 + 4096
    assert pre.act_bytes_per_token == 32 * 960
    assert ops["gated_norm"].weight_bytes == 2048  # H P weights


def test_attention_layers_carry_no_ffn_block(compose):
    """29 layers: 6 attention ones (no FFN block), 23 Mamba-2 ones each with an MoE block. The FFN ops
    repeat 29 times at the layer average: MoE share 23 / 29, dense share 0; the pre-FFN norm and the
    FFN's all-reduce run in the 23 layers that have the block."""
    m, ops = _ops(compose)
    assert ops["qkv_proj"].repeat == ops["attention"].repeat == 6
    assert ops["attn_allreduce"].repeat == 29 and ops["mlp_allreduce"].repeat == 23
    assert ops["residual_norm"].repeat == 23
    # router: 23 / 29 x 2 x 2,688 x 128 FLOPs per token and layer
    assert ops["router"].flops_per_token == pytest.approx(23 / 29 * 2 * 2688 * 128)
    # up + down of each expert (squared ReLU: two matrices), top-6 + 2 shared widths of 1,856 / tp 2 = 928
    assert ops["gate_up_proj"].flops_per_token == pytest.approx(23 / 29 * 8 * 2 * 2688 * 928)


def test_parameters_match_the_models(compose):
    """Nemotron 3 Nano: 31.58B with both embedding tables, 3.58B read per token (public pages: 30B
    total, 3.5B active); Nemotron-H 56B: 56.32B, dense."""
    p = layers.param_counts(compose(NANO).model)
    assert p["total"] / 1e9 == pytest.approx(31.578, abs=1e-3)
    assert p["active"] / 1e9 == pytest.approx(3.580, abs=1e-3)
    h = layers.param_counts(compose("model=nemotron_h_56b").model)
    assert h["total"] / 1e9 == pytest.approx(56.324, abs=1e-3) and h["active"] == h["total"]


def test_profile_leaves_out_decode_only_ops(compose):
    """The start-up profile is a prefill: the decode op's bytes per token (the state's read and write,
    2.1 MB) are no activation of it. The peak is the widest op that runs in a prefill: here the MoE's
    gate_up output + input of 64 tokens, not 8,192 x 2.1 MB = 17 GB."""
    m, ops = _ops(compose)
    work = max(o.act_bytes_per_token for o in ops.values() if o.stage == "layer" and o.path != "decode")
    peak = profile_reserve.forward_peak_bytes(ops.values(), 8192, m.d_model, 2.0)
    assert peak == 8192 * (work + 2688 * 2) and work < ops["ssm_decode"].act_bytes_per_token / 10


def test_states_in_the_kv_pool(compose):
    """vLLM (engine.state_in_kv_pool): no state is held back from the pool; each held sequence takes its
    states as pages of the pool (vLLM's hybrid KV cache manager). Nemotron 3 Nano at TP1, BF16 KV: a layer's
    KV per token 2 heads x 128 x 2 x 2 B = 1,024 B (6 layers: 6,144 B); a Mamba layer's state 64 x 128 x 64 x
    4 B + 3 x 6,144 x 2 B = 2,134,016 B; the attention block grows to 16 ceil(2,134,016 / (16 x 1,024)) =
    16 x 131 = 2,096 tokens; layers grouped 6 a group (min(6, 23)), so a request holds ceil(23 / 6) = 4 state
    blocks = 8,384 token-equivalents; a 100-token sequence holds 1 + 4 blocks, an empty one none."""

    class E:
        state_pool_ratio, max_batch, state_in_kv_pool = 0.0, 512, True

    assert kv_costs.less_state_pool(1e11, 24_541_184, E) == 1e11
    cfg = compose(NANO, "hardware=h100_sxm", "hardware.n_chips=1", "workload=closed_loop", "engine=vllm")
    design = build(cfg)
    assert design.memory["state_bytes_per_seq"] == 23 * 2_134_016
    per_tok = S.kv_bytes_per_token_chip(design)
    assert per_tok == 6144
    assert EV.kv_paging(cfg, design, per_tok) == {"block": 2096.0, "state_tokens": 8384.0}
    eng, _, _ = EV.engine_inputs(cfg, design, np.array([100.0]), np.array([10.0]))
    assert eng[Eng.BLOCK] == 2096 and eng[Eng.STATE_TOKENS] == 8384
    assert kv_blocks(100.0, eng) == 5 and kv_blocks(0.0, eng) == 0
    assert eng[Eng.CAP_BLOCKS] == np.floor(design.memory["kv_pool_bytes"] / 6144 / 2096)
    sglang = compose(
        NANO, "hardware=h100_sxm", "hardware.n_chips=1", "workload=closed_loop", "engine=sglang_0_5_8"
    )
    assert EV.kv_paging(sglang, build(sglang), per_tok)["state_tokens"] == 0.0  # its own state pool


@pytest.mark.parametrize("engine", ["vllm", "sglang_0_5_8"])
def test_serving_matches_the_reference(compose, engine):
    cfg = compose(
        NANO, "hardware=h100_sxm", "hardware.n_chips=2", "workload=closed_loop", f"engine={engine}",
        "workload.concurrency=6", "workload.prompt_len=700", "workload.output_len=12",
    )  # fmt: skip
    steps = assert_serve_matches_reference(cfg)
    assert len(steps) > 0


@pytest.mark.parametrize(
    "checkpoint, name",
    [
        ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron_3_nano_30b_a3b"),
        ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nemotron_3_nano_30b_a3b"),
        ("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", "nemotron_3_5_lightning_30b_a3b"),
        ("nvidia/Nemotron-H-56B-Base-8K", "nemotron_h_56b"),
    ],
)
def test_checkpoints_map_to_the_configs(checkpoint, name):
    assert model_of(checkpoint) == (name, "")


@pytest.mark.parametrize(
    "config, name",
    [
        ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron_3_nano_30b_a3b"),
        ("Nemotron-H-56B-Base-8K", "nemotron_h_56b"),
    ],
)
def test_import_model_writes_the_shipped_config(config, name):
    """`decodelab import-model` on the public config.json gives every field of the shipped YAML."""
    assert_import_matches_shipped(CONFIGS / f"{config}.json", name)


def test_import_model_refuses_what_it_cannot_express():
    """More FFN blocks than mixers (a layer holds one) and a block kind it does not know."""
    d = hf_model.load_json(str(CONFIGS / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"))
    with pytest.raises(ConfigError, match="3 FFN blocks for 2 mixers"):
        hf_model.from_config({**d, "hybrid_override_pattern": "ME*EE"}, "x")
    with pytest.raises(ConfigError, match="block kinds X"):
        hf_model.from_config({**d, "hybrid_override_pattern": "MXE"}, "x")


def test_validate_runs_nemotron_rows(tmp_path):
    """Synthetic serving rows (placeholder times, not measurements) of each engine family: run, not refused."""
    csv = tmp_path / "n.csv"
    csv.write_text(
        "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16,vllm,0.12.0,bf16,1,1024,64,8,100,10\n"
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8,sglang,0.5.9,fp8,1,1024,64,8,100,10\n"
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16,trtllm,1.0.0rc3,bf16,2,1024,64,8,100,10\n"
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8,vllm,0.12.0,fp8,4,1024,64,8,100,10\n"
    )
    df = run_validation(csv)
    assert list(df.status) == ["ok"] * 4 and (df.tpot_pred > 0).all() and (df.ttft_pred > 0).all()


def test_latent_moe_ops_at_tp4(compose):
    """Nemotron 3 Super at tp 4 (48 layers, 40 with an MoE block: f = 40 / 48): routed experts at the
    latent width 1024, each 1024 x 2688 / 4 = 688,128 weights a chip per matrix (up, down: squared ReLU);
    fc1 / fc2_latent_proj 4096 x 1024 on every chip; the shared MLP 4096 x 2 x 2688 / 4 = 4096 x 1344."""
    m = compose("model=nemotron_3_super_120b_a12b").model
    ops = {op.name: op for op in layers.build_ops(m, 4, 1.0, 2.0, 1.0, tokens_per_step=1)}
    f = 40 / 48
    assert ops["gate_up_proj"].resident_bytes == pytest.approx(f * 512 * 1024 * 672)  # 512 experts, no shared
    assert ops["gate_up_proj"].moe_block[1] == 1024  # the measured MoE block looked up at the latent width
    assert ops["latent_down"].weight_bytes == pytest.approx(f * 4096 * 1024)
    assert ops["latent_up"].flops_per_token == pytest.approx(f * 2 * 1024 * 4096)
    assert ops["shared_up"].weight_bytes == pytest.approx(f * 4096 * 1344)
    assert ops["shared_down"].flops_per_token == pytest.approx(f * 2 * 1344 * 4096)
    # one token reads its 22 routed experts' up and down at the latent width: 22 x 1024 x 672 a chip, each
    assert ops["gate_up_proj"].flops_per_token == pytest.approx(f * 22 * 2 * 1024 * 672)


@pytest.mark.parametrize(
    "name, total, active",
    [("nemotron_3_super_120b_a12b", 120.67, 12.77), ("nemotron_3_ultra_550b_a55b", 549.31, 56.06)],
)
def test_latent_moe_parameters(compose, name, total, active):
    """Nemotron 3 Super 120B-A12B and Ultra 550B-A55B, with both embedding tables: routed experts at the
    latent width, the shared MLP and the two latent projections at d."""
    p = layers.param_counts(compose(f"model={name}").model)
    assert (round(p["total"] / 1e9, 2), round(p["active"] / 1e9, 2)) == (total, active)
