"""Neural-architecture-searched Llama derivatives in `decodelab import-model` (config.hf_model): NVIDIA's
Llama-Nemotron Super / Ultra (model_type nemotron-nas, DeciLMForCausalLM). Their config.json gives each layer a
`block_configs` entry: its attention is a GQA block (`n_heads_in_group` query heads per KV head) or a no-op, its
FFN a SwiGLU of `ffn_mult` (modeling_decilm.py `_ffn_mult_to_intermediate_size`: int(2 ffn_mult d / 3) rounded up
to a multiple of 256). A no-op attention is a layer of kind `none` (no mixer, no input norm: DeciLMDecoderLayer
skips both); the FFN widths enter as their mean (`ffn_dim`): every FFN op is linear in the width, so weights,
FLOPs and bytes summed over the layers are exact (only a GEMM's per-shape efficiency differs)."""

from __future__ import annotations

import math
from typing import List

from decodelab.errors import ConfigError

TYPES = ("nemotron-nas",)


def is_nas(d: dict) -> bool:
    return d.get("model_type") in TYPES and isinstance(d.get("block_configs"), list)


def ffn_width(mult: float, d_model: int) -> int:
    """DeciLM's FFN width of a layer: int(2 ffn_mult d / 3), rounded up to a multiple of 256."""
    return int(math.ceil(int(2 * mult * d_model / 3) / 256) * 256)


def _unsupported(block: dict, part: str) -> List[str]:
    cfg = block.get(part) or {}
    out = [f"{part}.{k}" for k in ("replace_with_linear",) if cfg.get(k)]
    out += [f"{part}.{k}" for k in ("sparsify", "window_length", "num_sink_tokens") if cfg.get(k) is not None]
    return out + ([f"{part}.no_op"] if part == "ffn" and cfg.get("no_op") else [])


def with_uniform_keys(d: dict, path: str) -> dict:
    """`d` with the keys every layer shares (num_key_value_heads, intermediate_size = the mean FFN width)
    where a nemotron-nas config gives them per layer; ConfigError for a block it cannot express."""
    if not is_nas(d):
        return d
    blocks, hidden, heads = d["block_configs"], int(d["hidden_size"]), int(d["num_attention_heads"])
    bad = sorted({k for b in blocks for part in ("attention", "ffn") for k in _unsupported(b, part)})
    if bad:
        raise ConfigError(
            f"{path}: block_configs set {', '.join(bad)}: not modelled (attention and FFN blocks only)"
        )
    groups = {b["attention"]["n_heads_in_group"] for b in blocks if not b["attention"].get("no_op")}
    if len(groups) != 1:
        raise ConfigError(
            f"{path}: block_configs n_heads_in_group {sorted(groups)}: one KV-head count per model"
        )
    return {
        **d,
        "num_key_value_heads": heads // groups.pop(),
        "intermediate_size": int(round(mean_width(blocks, hidden) / 256) * 256),
    }


def mean_width(blocks: list, hidden: int) -> float:
    """The layers' mean FFN width (config.json: written to the nearest multiple of 256, as each width is, so every
    tensor-parallel degree that divides a layer's width divides it too)."""
    return sum(ffn_width(b["ffn"]["ffn_mult"], hidden) for b in blocks) / len(blocks)


def read(r, imp) -> None:
    """The layer kinds (full, or none for a no-op attention) and where the KV heads and FFN width came from."""
    blocks, hidden = r.get("block_configs"), imp.values["d_model"]
    kinds = ["none" if b["attention"].get("no_op") else "full" for b in blocks]
    imp.set(
        "layer_pattern", kinds, f"config.json block_configs: {kinds.count('none')} no-op attentions (none)"
    )
    mean = mean_width(blocks, hidden)
    imp.why["ffn_dim"] = (
        f"config.json block_configs: the layers' mean FFN width {mean:.1f} to a multiple of 256 "
        f"({100 * (imp.values['ffn_dim'] / mean - 1):+.2f}%); widths "
        f"{sorted({ffn_width(b['ffn']['ffn_mult'], hidden) for b in blocks})}"
    )
    imp.why["n_kv_heads"] = "config.json block_configs n_heads_in_group (query heads per KV head)"
