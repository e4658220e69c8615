"""Full-attention layers of their own shape (components/models/global_attn.py; Gemma 4, MiMo-V2-Flash) and value
heads narrower than the keys (MiMo-V2-Flash): parameter counts against the model cards' figures, the cache bytes
per kind worked by hand, the ops of each kind, the importer against the shipped files, a validate row per model."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_aic_rows_run, assert_import_matches_shipped, compose_cfg
from decodelab.components.models import layers
from decodelab.core.build import build

HF = Path(__file__).parent / "data" / "hf_configs"


def model(name):
    return compose_cfg(f"model={name}").model


def test_parameters_match_the_model_cards():
    """Card copies: 26B-A4B 25.2B total / 3.8B active (the dense MLP counted as shared experts), 31B 30.7B;
    the full layers have no v_proj (attention_k_eq_v)."""
    p = layers.param_counts(model("gemma_4_26b_a4b"))
    assert (p["total"] / 1e9, p["active"] / 1e9) == (
        pytest.approx(25.233, abs=0.001),
        pytest.approx(3.822, abs=0.001),
    )
    assert layers.param_counts(model("gemma_4_31b"))["total"] / 1e9 == pytest.approx(30.697, abs=0.001)


def test_cache_bytes_per_kind_by_hand():
    """26B, BF16: 25 sliding layers of 2 x 8 x 256 and 5 full ones of 2 x 2 x 512 elements per token:
    (102,400 + 10,240) x 2 = 225,280 B as if every layer kept every token; the full layers' byte share
    10,240 / 112,640 = 1/11 (not their layer share 1/6)."""
    m = model("gemma_4_26b_a4b")
    assert layers.kv_bytes_per_token(m, 2.0) == 225_280.0
    mix = layers.kv_layer_mix(m, 2.0)
    assert (mix["full"], mix["sliding"], mix["window"]) == (
        pytest.approx(1 / 11),
        pytest.approx(10 / 11),
        1024.0,
    )


def test_each_kind_gets_its_own_ops():
    """TP8, 26B: sliding layers 2 query and 1 KV head of 256 a chip, full layers 2 query heads and 1 KV head
    (2 over 8 chips: replicated) of 512; KV per chip and token 25 x 1,024 + 5 x 2,048 = 35,840 B."""
    d = build(compose_cfg("model=gemma_4_26b_a4b", "hardware=dgx_h100"))
    ops = {op.name: op for op in d.ops}
    assert (ops["qkv_proj"].gemm_n, ops["qkv_proj"].repeat) == ((2 + 2) * 256, 25)
    assert (ops["qkv_proj_full"].gemm_n, ops["qkv_proj_full"].repeat) == ((2 + 2) * 512, 5)
    assert ops["attention_full"].attn_head_dim == 512 and ops["attention"].attn_head_dim == 256
    assert sum(op.kv_write_per_token * op.repeat for op in d.ops) == 35_840.0


@pytest.mark.parametrize(
    "path, name",
    [
        ("gemma-4-26B-A4B.json", "gemma_4_26b_a4b"),
        ("Gemma-4-31B-IT-NVFP4.json", "gemma_4_31b"),
        ("MiMo-V2-Flash.json", "mimo_v2_flash"),
        ("MiniMax-M3.json", "minimax_m3"),
    ],
)
def test_import_equals_the_shipped_file(path, name):
    assert_import_matches_shipped(HF / path, name, arch="moe" if name == "minimax_m3" else "hybrid")


def test_rows_run(tmp_path):
    rows = [
        "a,vllm,0.19.0,google/gemma-4-26B-A4B,h100_sxm,,agg,1024,256,bfloat16,bfloat16,16,1,1,1,1,1,100,10\n",
        "b,vllm,0.19.0,nvidia/Gemma-4-31B-IT-NVFP4,b200_sxm,nvfp4,agg,1024,256,nvfp4,,16,2,1,1,,,100,10\n",
    ]
    assert_aic_rows_run(tmp_path, rows)


def test_mimo_v2_flash_by_hand():
    """Model card: 309B total, 15B active. Cache per token: 39 sliding layers of 8 KV heads and 9 full of 4, each
    head 192 (K) + 128 (V): (39 x 2,560 + 9 x 1,280) x 2 B = 222,720 B. TP8: a sliding layer's QKV GEMM 8 query
    heads x 192 + 1 x 192 + 1 x 128 = 1,856 wide, o_proj 8 x 128 in, attention 2 x 8 x (192 + 128) FLOPs a pair."""
    m = model("mimo_v2_flash")
    p = layers.param_counts(m)
    assert (p["total"] / 1e9, (p["active"] - p["embed"]) / 1e9) == (
        pytest.approx(308.78, abs=0.01),
        pytest.approx(14.82, abs=0.01),
    )
    assert layers.kv_bytes_per_token(m, 2.0) == 222_720.0
    d = build(compose_cfg("model=mimo_v2_flash", "hardware=dgx_h100", "workload.weight_dtype=fp8_block"))
    ops = {op.name: op for op in d.ops}
    assert (ops["qkv_proj"].gemm_n, ops["o_proj"].gemm_k, ops["attention"].attn_flops_per_ctx) == (
        1856,
        1024,
        5120,
    )
    assert (
        sum(op.kv_write_per_token * op.repeat for op in d.ops) == (39 * 320 + 9 * 320) * 2.0
    )  # 1 KV head a chip


def test_byte_shares_are_a_chips():
    """MiMo-V2-Flash at TP8: the sliding layers' 8 KV heads split to 1 a chip, the full layers' 4 replicated to 1: a
    chip's full share 9 / 48 (unsharded, 9 x 1,280 / 111,360)."""
    m = model("mimo_v2_flash")
    assert layers.kv_layer_mix(m, 2.0)["full"] == pytest.approx(9 * 1280 / 111_360)
    assert layers.kv_layer_mix(m, 2.0, 8)["full"] == pytest.approx(9 / 48)


def test_minimax_m3_block_sparse_by_hand():
    """60 layers of 4 KV heads x (128 + 128), 57 of them sparse with a 128-wide index key: (60 x 1,024 + 57 x 128) x
    2 B = 137,472 B a token at BF16. At TP4 a chip holds 1 KV head (512 B a layer) and every index key (256 B): a
    decode step at 8,192 tokens reads 3 x 512 x 8,192 + 57 x 256 x 8,192 (index keys, full) + 57 x 512 x 2,048
    (the top-16 blocks of the sparse layers) = 192,020,480 B a sequence."""
    m = model("minimax_m3")
    p = layers.param_counts(m)
    assert p["total"] / 1e9 == pytest.approx(426.175, abs=0.001)
    assert (p["active"] - p["embed"]) / 1e9 == pytest.approx(24.73, abs=0.01)  # card: 23B without the head
    assert layers.kv_bytes_per_token(m, 2.0) == 137_472.0
    mix = layers.kv_layer_mix(m, 2.0, 4)
    per_chip = 60 * 512 + 57 * 256
    x = mix["full"] * 8192 + mix["sparse"] * min(8192, mix["topk"])
    assert x * per_chip == pytest.approx(3 * 512 * 8192 + 57 * 256 * 8192 + 57 * 512 * 2048)
    d = build(compose_cfg("model=minimax_m3", "hardware=dgx_h100", "workload.weight_dtype=fp8_block"))
    # TP8: the 4 KV heads replicated, a chip's cache as at TP4
    assert sum(op.kv_write_per_token * op.repeat for op in d.ops) == per_chip


def test_importer_refuses_incomplete_configs_in_one_line():
    import json

    from decodelab.config import hf_model
    from decodelab.errors import ConfigError

    m3 = json.loads((HF / "MiniMax-M3.json").read_text())
    m3["sparse_attention_config"].pop("sparse_topk_blocks")
    with pytest.raises(ConfigError, match="sparse_attention_config needs sparse_topk_blocks"):
        hf_model.from_config(m3, "m3")
    mimo = json.loads((HF / "MiMo-V2-Flash.json").read_text())
    mimo.pop("v_head_dim")
    with pytest.raises(ConfigError, match="no v_head_dim"):
        hf_model.from_config(mimo, "mimo")
