"""Gated DeltaNet hybrids (components/models/linear_attn.py; Qwen3.5-397B-A17B, config.json
text_config: d 4096, 60 layers [linear x3, full], 16 key / 64 value heads of 128, conv kernel 4,
32 query / 2 KV heads of 256 with an output gate, 512 experts top-10 + one gated shared expert of 1024).
Every figure below is worked out by hand in its comment."""

from __future__ import annotations

import json

import pytest
from decodelab.components.models import layers, linear_attn
from decodelab.config import hf_model, hf_yaml
from decodelab.core import kv_costs
from decodelab.core.build import build
from decodelab.runs.validation import run_validation


def _ops(compose, tp=8, **kw):
    m = compose("model=qwen3_5_397b_a17b", *[f"model.{k}={v}" for k, v in kw.items()]).model
    return m, {op.name: op for op in layers.build_ops(m, tp, 1.0, 2.0, 1.0, tokens_per_step=64)}


def test_one_linear_layer_at_tp8(compose):
    """tp 8: 16 / 8 = 2 key heads, 64 / 8 = 8 value heads a chip; conv_dim = 2 x 2 x 128 + 8 x 128
    = 1536; FP8 weights (1 byte), BF16 activations."""
    m, ops = _ops(compose)
    assert linear_attn.n_linear(m) == 45 and ops["in_proj_qkv"].repeat == 45
    assert ops["in_proj_qkv"].weight_bytes == 4096 * 1536  # 6,291,456
    assert ops["in_proj_z"].weight_bytes == 4096 * 1024
    assert ops["in_proj_ba"].gemm_n == 2 * 8
    assert ops["out_proj"].flops_per_token == 2 * 1024 * 4096  # 8,388,608
    # decode: the fp32 state 8 x 128 x 128 x 4 = 524,288 B read and written, + q, k, v (1536 x 2 B),
    # o, beta, a ((1024 + 16) x 2 B): 1,048,576 + 3,072 + 2,080 = 1,053,728 B per token
    dec = ops["gdn_decode"]
    assert dec.path == "decode" and dec.act_bytes_per_token == 1_053_728
    assert dec.flops_per_token == 8 * 7 * 128 * 128 + 8 * 256  # 919,552
    # conv state 3 x 1536 x 2 B = 9,216; state per sequence and layer 524,288 + 9,216 = 533,504 B
    assert dec.state_bytes_per_seq == 533_504
    assert ops["conv1d_update"].act_bytes_per_token == 2 * 1536 * 2 + 2 * 9216  # 24,576
    # prefill, per token and value head: 64 (6 x 128 + 4 x 128) + 64^2 / 3 + 6 x 128^2 = 81,920 +
    # 1,365.33 + 98,304 = 181,589.33 FLOPs; bytes (7 x 128 + 6 x 128 + 2 x 64 + 2 x 128^2 / 64) x 2
    # + 8 x 64 = (1664 + 128 + 512) x 2 + 512 = 5,120
    pre = ops["gdn_prefill"]
    assert pre.path == "prefill"
    assert pre.flops_per_token == pytest.approx(8 * 181_589.333 + 8 * 256, rel=1e-6)
    assert pre.act_bytes_per_token == 8 * 5120 + 2 * 8 * 2  # 40,992


def test_gated_attention_on_the_full_layers_only(compose):
    """15 full layers; q_proj doubled for the gate: (2 x 4 + 2 x 1) x 256 = 2,560 outputs a chip
    (4 query heads, 2 KV heads on 8 chips: 1, replicated); the KV of a token 2 x 256 x 1 B = 512 B."""
    m, ops = _ops(compose)
    assert ops["qkv_proj"].repeat == ops["attention"].repeat == ops["o_proj"].repeat == 15
    assert ops["qkv_proj"].gemm_n == 2560 and ops["rope_kv_write"].kv_write_per_token == 512
    assert ops["attn_gate"].act_bytes_per_token == (2 * 4 * 256 + 4 * 256) * 2  # gate, out; out
    assert ops["attn_allreduce"].repeat == ops["gate_up_proj"].repeat == 60
    assert ops["shared_expert_gate"].weight_bytes == 4096  # hidden -> 1, FP8
    # the KV pool sees the 15 attention layers only, all full: no `state` token-equivalents
    assert layers.kv_layer_mix(m, 1.0)["full"] == 1.0 and layers.kv_layer_mix(m, 1.0)["state"] == 0.0
    assert layers.kv_bytes_per_token(m, 1.0) == 15 * 2 * 2 * 256  # 15,360 B over all chips


def test_parameters_match_the_model_card(compose):
    """396.35B parameters (Qwen3.5-397B-A17B: 397B with the vision tower), 17.35B active."""
    p = layers.param_counts(compose("model=qwen3_5_397b_a17b").model)
    assert p["total"] / 1e9 == pytest.approx(396.346, abs=1e-3)
    assert p["active"] / 1e9 == pytest.approx(17.349, abs=1e-3)


def test_state_per_sequence_and_the_kv_pool(compose):
    """A static design holds per sequence its KV (15 layers x 512 B = 7,680 B a token and chip) and
    its states (45 x 533,504 = 24,007,680 B a chip); bf16 states (SGLang --mamba-ssm-dtype bfloat16):
    45 x (8 x 128^2 x 2 + 9,216) = 45 x 271,360 = 12,211,200 B."""
    base = ("model=qwen3_5_397b_a17b", "hardware=dgx_h100", "hardware.tensor_parallel=8")
    run = (
        "workload.weight_dtype=fp8",
        "workload.kv_dtype=fp8",
        "workload.prompt_len=1000",
        "workload.output_len=24",
    )
    d = build(compose(*base, *run))
    assert d.kv_slot_bytes_chip == pytest.approx(1024 * 7680 + 24_007_680)
    bf = build(compose(*base, *run, "model.linear_state_dtype=bf16"))
    assert bf.kv_slot_bytes_chip == pytest.approx(1024 * 7680 + 12_211_200)
    assert bf.max_batch > d.max_batch


def test_the_state_pool_takes_its_share_of_the_kv_pool():
    """SGLang (ratio 0.9): the KV pool is 1 / 1.9 of the memory left; TensorRT-LLM-like (ratio 0): one
    state per sequence the engine may run: 100 GB - 512 x 24,007,680 B = 87,708,067,840 B; vLLM
    (state_in_kv_pool): nothing held back, each held sequence's share of the pool carries its states."""

    class E:
        state_pool_ratio, max_batch, state_in_kv_pool = 0.9, 512, False

    assert kv_costs.less_state_pool(1.9e11, 24_007_680, E) == pytest.approx(1e11)
    E.state_pool_ratio = 0.0
    assert kv_costs.less_state_pool(1e11, 24_007_680, E) == pytest.approx(87_708_067_840)
    assert kv_costs.less_state_pool(1e11, 0.0, E) == 1e11  # no linear layers: unchanged
    E.state_in_kv_pool = True
    assert kv_costs.less_state_pool(1e11, 24_007_680, E) == 1e11


def test_import_model_reads_the_qwen35_config(tmp_path):
    """config.json of Qwen3.5-397B-A17B (a text_config inside a multimodal config): the YAML shipped."""
    tc = {
        "model_type": "qwen3_5_moe_text", "hidden_size": 4096, "num_hidden_layers": 8,
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"], "full_attention_interval": 4,
        "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32",
        "attn_output_gate": True, "num_experts": 512, "num_experts_per_tok": 10,
        "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024, "mtp_num_hidden_layers": 1,
        "hidden_act": "silu", "max_position_embeddings": 262144,
    }  # fmt: skip
    tc["layer_types"] = tc["layer_types"] * 2
    imp = hf_model.from_config(
        {"model_type": "qwen3_5_moe", "tie_word_embeddings": False, "text_config": tc}, "q"
    )
    v = imp.values
    assert v["arch"] == "hybrid" and v["layer_pattern"] == ["linear", "linear", "linear", "full"]
    assert (v["linear_k_heads"], v["linear_v_heads"], v["linear_conv_kernel"]) == (16, 64, 4)
    assert v["linear_state_dtype"] == "fp32" and v["attn_output_gate"] and v["shared_expert_gate"]
    assert v["n_shared_experts"] == 1 and v["n_mtp_modules"] == 1 and v["qk_norm"]
    text = hf_yaml.to_yaml(imp)
    assert "linear_v_heads: 64" in text and "attn_output_gate: true" in text
    # a qwen3_next config without the Gated DeltaNet keys stays refused (tests/test_import_model.py)
    assert json.dumps(tc)  # the config is plain JSON


def test_validate_runs_a_qwen35_row(tmp_path):
    """One synthetic serving row (placeholder times, not a measurement): run, not refused."""
    csv = tmp_path / "q.csv"
    csv.write_text(
        "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
        "Qwen/Qwen3.5-35B-A3B-FP8,sglang,0.5.9,fp8,2,1024,64,4,100,10\n"
    )
    df = run_validation(csv)
    assert list(df.status) == ["ok"] and (df.tpot_pred > 0).all() and (df.ttft_pred > 0).all()
