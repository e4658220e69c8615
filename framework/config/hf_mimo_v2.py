"""MiMo-V2-Flash's keys of a config.json (`decodelab import-model`; model_type `mimo_v2_flash`; vLLM and SGLang
mimo_v2_flash.py: `hybrid_layer_pattern[i] == 1` marks a sliding-window layer, whose attention takes the `swa_*`
shapes): the layer kinds, the sliding layers' KV heads and the full layers' (`num_key_value_heads`), the value
heads' width (`v_head_dim`, 128 beside 192-dim queries and keys). The window is `sliding_window` (=
`sliding_window_size` = `attention_chunk_size`); the sliding layers' sink bias and the value scale cost nothing.
Model: components/models/global_attn.py."""

from __future__ import annotations

from typing import List

from decodelab.errors import ConfigError

NO_COST = (
    "sliding_window_size",
    "attention_chunk_size",
    "swa_rope_theta",
    "partial_rotary_factor",
    "attention_value_scale",
    "add_swa_attention_sink_bias",
    "add_full_attention_sink_bias",
    "swa_v_head_dim",
    "swa_num_attention_heads",
    "swa_head_dim",
)


def is_mimo_v2(d: dict) -> bool:
    return bool(d.get("hybrid_layer_pattern")) and "swa_num_key_value_heads" in d


def kinds(r, n: int) -> List[str]:
    """The layer kinds of hybrid_layer_pattern (1: sliding, 0: full), [] for other models."""
    if not is_mimo_v2(r.d):
        return []
    pat = [int(x) for x in r.get("hybrid_layer_pattern")]
    if len(pat) != n:
        raise ConfigError(
            f"config.json hybrid_layer_pattern has {len(pat)} entries for num_hidden_layers={n}"
        )
    return ["sliding" if x == 1 else "full" for x in pat]


def read(r, imp) -> None:
    """Set the per-kind attention fields of `imp` from the config.json reader `r` (hf_reader.Keys)."""
    if not is_mimo_v2(r.d):
        return
    need = [k for k in ("num_key_value_heads", "swa_num_key_value_heads", "v_head_dim") if not r.get(k)]
    if need:
        raise ConfigError(
            f"{imp.path} has hybrid_layer_pattern but no {', '.join(need)} (per-kind attention)"
        )
    same = ("num_attention_heads", "head_dim", "v_head_dim")
    differ = [k for k in same if r.get(f"swa_{k}") not in (None, r.get(k))]
    if differ:
        raise ConfigError(
            f"{imp.path}: the sliding layers' {', '.join(differ)} differ from the full layers' (not modelled)"
        )
    full_kv, swa_kv = int(r.get("num_key_value_heads")), int(r.get("swa_num_key_value_heads"))
    imp.set("n_kv_heads", swa_kv, "config.json swa_num_key_value_heads (the sliding layers)")
    imp.set("global_kv_heads", full_kv, "config.json num_key_value_heads (the full layers)")
    imp.set(
        "v_head_dim", int(r.get("v_head_dim")), "config.json v_head_dim (values; queries and keys: head_dim)"
    )
    for k in NO_COST:
        r.get(k)
