"""Layers without a mixer (layer_pattern kind `none`) and NVIDIA's searched Llama derivatives
(framework/config/hf_nas.py): Llama-3.3-Nemotron-Super-49B-v1, 80 layers of d 8192, 64 query heads of 128, 49 with
a GQA attention of 8 KV heads and 31 with none, SwiGLU FFNs of widths 2,816 to 28,672. Every figure below is
worked out by hand in its comment."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_import_matches_shipped
from decodelab.components.models import layers, linear_attn
from decodelab.config import hf_model, hf_nas
from decodelab.errors import ConfigError
from decodelab.runs.validation import run_validation

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "Llama-3_3-Nemotron-Super-49B-v1.json"
NAS = "model=llama3_3_nemotron_super_49b"


@pytest.mark.parametrize(
    "mult, width",
    [
        (5.25, 28672),
        (2.625, 14336),
        (1.0, 5632),
        (0.5, 2816),
    ],  # int(2 x 5.25 x 8192 / 3) = 28,672; 1.0: 5,461 -> 5,632
)
def test_ffn_width_of_a_block(mult, width):
    assert hf_nas.ffn_width(mult, 8192) == width


def test_mixerless_layers_at_tp2(compose):
    """tp 2: attention, its input norm and its all-reduce in the 49 attention layers; the FFN (mean width
    20,480 / 2 = 10,240 a chip) and its norm and all-reduce in all 80; KV of 49 layers x 2 x 8 x 128 x 2 B
    = 200,704 B a token (4,096 a layer and chip at tp 2)."""
    m = compose(NAS).model
    ops = {op.name: op for op in layers.build_ops(m, 2, 1.0, 2.0, 2.0, tokens_per_step=1)}
    assert linear_attn.n_attending(m) == 49 and linear_attn.n_mixers(m) == 49
    assert ops["qkv_proj"].repeat == ops["attention"].repeat == ops["o_proj"].repeat == 49
    assert ops["input_norm"].repeat == ops["attn_allreduce"].repeat == 49
    assert ops["gate_up_proj"].repeat == ops["mlp_allreduce"].repeat == ops["residual_norm"].repeat == 80
    assert ops["gate_up_proj"].weight_bytes == 8192 * 2 * 10240
    assert layers.kv_bytes_per_token(m, 2.0) == 200_704
    assert layers.kv_layer_mix(m)["full"] == 1.0  # the shares are over the attending layers


def test_parameters(compose):
    """49.77B (the card's 49B; 49.87B with the exact per-layer widths instead of their mean)."""
    assert layers.param_counts(compose(NAS).model)["total"] / 1e9 == pytest.approx(49.77, abs=0.005)


def test_import_model_writes_the_shipped_config():
    assert_import_matches_shipped(CONFIG, "llama3_3_nemotron_super_49b")


def test_import_model_refuses_blocks_it_cannot_express():
    d = hf_model.load_json(str(CONFIG))
    blocks = [dict(b) for b in d["block_configs"]]
    blocks[0] = {
        **blocks[0],
        "attention": {**blocks[0]["attention"], "no_op": False, "replace_with_linear": True},
    }
    with pytest.raises(ConfigError, match="attention.replace_with_linear: not modelled"):
        hf_model.from_config({**d, "block_configs": blocks}, "x")
    blocks[0] = {
        **d["block_configs"][0],
        "attention": {**d["block_configs"][0]["attention"], "n_heads_in_group": 4},
    }
    with pytest.raises(ConfigError, match=r"n_heads_in_group \[4, 8\]"):
        hf_model.from_config({**d, "block_configs": blocks}, "x")


def test_validate_runs_a_nas_row(tmp_path):
    """A synthetic serving row (placeholder times, not a measurement): run, not refused."""
    csv = tmp_path / "n.csv"
    csv.write_text(
        "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
        "nvidia/Llama-3_3-Nemotron-Super-49B-v1,vllm,0.12.0,fp8,2,1024,64,8,100,10\n"
    )
    df = run_validation(csv)
    assert list(df.status) == ["ok"] and (df.tpot_pred > 0).all()
