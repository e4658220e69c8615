"""DeepSeek Sparse Attention's keys of a config.json (`decodelab import-model`; DeepSeek-V3.2
`deepseek_v32`, GLM-5 `glm_moe_dsa`): the lightning indexer's `index_topk`, `index_n_heads`,
`index_head_dim`, and GLM-5.2's `indexer_types` (layers marked `shared` reuse the last `full`
layer's top-k: `index_layers` counts the full ones). Model: components/models/dsa.py."""

from __future__ import annotations

from decodelab.errors import ConfigError

# keys that only say how indexer layers are laid out or computed, read with indexer_types
LAYOUT_KEYS = (
    "index_topk_freq",
    "index_skip_topk_offset",
    "index_topk_pattern",
    "index_share_for_mtp_iteration",
    "indexer_rope_interleave",
)


def read(r, imp) -> None:
    """Set the index_* fields of `imp` from the config.json reader `r` (hf_reader.Keys)."""
    if not r.get("index_topk", 0):
        return
    need = [k for k in ("index_n_heads", "index_head_dim") if not r.get(k, 0)]
    if need:
        raise ConfigError(
            f"{imp.path} has index_topk but no {', '.join(need)} (required for sparse attention)"
        )
    if "kv_lora_rank" not in imp.values and "compress_ratios" not in imp.values:
        raise ConfigError(
            f"{imp.path} has index_topk without kv_lora_rank: sparse attention is modelled over MLA "
            "(or DeepSeek-V4's compress_ratios)"
        )
    for k in ("index_topk", "index_n_heads", "index_head_dim"):
        imp.set(k, int(r.get(k)), f"config.json {k}")
    for k in LAYOUT_KEYS:
        r.get(k)
    types = r.get("indexer_types") or []
    n = imp.values["n_layers"]
    full = sum(1 for t in types if t == "full")
    if types and full < n:
        imp.set("index_layers", full, f"config.json indexer_types: {full} `full` of {n}, the rest `shared`")
