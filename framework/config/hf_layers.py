"""The layer kinds of a config.json (`decodelab import-model`): sliding-window layers (`layer_types`,
`use_sliding_window` + `max_window_layers`, `sliding_window_pattern`, a bare `sliding_window`, a family's
alternation), Gated DeltaNet ones (hf_linear.py), MiMo-V2's and Llama 4's patterns (hf_mimo_v2.py,
hf_llama4.py) -> `layer_pattern`, the shortest period that repeats to the layer list
(components/models/layers.py layer_kinds), and `sliding_window`."""

from __future__ import annotations

from typing import List

from decodelab.config import hf_linear, hf_llama4, hf_mimo_v2
from decodelab.config import hf_families as fam
from decodelab.config.hf_reader import Imported, Keys
from decodelab.errors import ConfigError

SLIDING = {"sliding_attention": "sliding", "sliding": "sliding", "local": "sliding"}
FULL = {"full_attention": "full", "full": "full", "global": "full", "attention": "full"}
LINEAR = {"linear_attention": "linear"}  # Gated DeltaNet (config/hf_linear.py)


def _period(kinds: List[str]) -> List[str]:
    """The shortest prefix that, repeated, gives `kinds` (components/models/layers.layer_kinds)."""
    for p in range(1, len(kinds) + 1):
        if all(kinds[i] == kinds[i % p] for i in range(len(kinds))):
            return kinds[:p]
    return kinds


def _kinds(r: Keys, imp: Imported, n: int, window: int):
    """(kind of every layer or None, where it came from), as transformers builds `layer_types`."""
    if r.has("layer_types"):
        raw = list(r.get("layer_types"))
        lin = LINEAR if hf_linear.is_gated_deltanet(r.d) else {}
        bad = sorted({str(t) for t in raw if t not in SLIDING and t not in FULL and t not in lin})
        if bad:
            allowed = ", ".join(sorted(set(SLIDING) | set(FULL)))
            raise ConfigError(
                f"config.json layer_types has {', '.join(bad)}: import-model writes attention layers only "
                f"(allowed: {allowed})"
            )
        if len(raw) != n:
            imp.notes.append(f"layer_types lists {len(raw)} layers for num_hidden_layers={n}")
        return [SLIDING.get(t, lin.get(t, "full")) for t in raw], "config.json layer_types"
    if hf_linear.kinds(r, n):
        return hf_linear.kinds(r, n), "config.json full_attention_interval"
    if hf_mimo_v2.kinds(r, n):
        return hf_mimo_v2.kinds(r, n), "config.json hybrid_layer_pattern (1: sliding)"
    if hf_llama4.chunk(r, imp.model_type):
        why = "config.json attention_chunk_size: RoPE layers attend within their chunk (costed as a window), the rest globally"
        return hf_llama4.chunk_kinds(r, n), why
    if "use_sliding_window" in r.d:
        if r.get("use_sliding_window") and window:
            mwl = int(r.get("max_window_layers", n))
            kinds = ["full"] * min(mwl, n) + ["sliding"] * max(n - mwl, 0)
            return kinds, f"config.json use_sliding_window true: layers from max_window_layers={mwl} on slide"
        r.get("max_window_layers")
        if window:
            imp.notes.append(f"sliding_window={window} is off (use_sliding_window false)")
        return None, ""
    if r.has("sliding_window_pattern") and window:
        p = int(r.get("sliding_window_pattern"))
        kinds = (["sliding"] * (p - 1) + ["full"]) * (n // p + 1)
        return kinds[:n], f"config.json sliding_window_pattern {p}: {p - 1} sliding, 1 full"
    if window and imp.model_type in fam.ALTERNATING:
        why = f"{imp.model_type} without layer_types: sliding on even layers, full on odd (transformers default)"
        return ["sliding", "full"] * (n // 2) + ["sliding"] * (n % 2), why
    if window:
        return ["sliding"] * n, "config.json sliding_window without layer_types: every layer slides"
    return None, ""


def read(r: Keys, imp: Imported) -> None:
    """`layer_pattern` (the shortest period of the layer kinds) and `sliding_window` where layers slide or are linear."""
    n = imp.values["n_layers"]
    chunk = hf_llama4.chunk(r, imp.model_type)  # Llama 4's chunked attention: written as a window
    window = chunk or r.get("sliding_window", 0)
    if "compress_ratios" in imp.values:  # DeepSeek-V4: every layer keeps its window (hf_deepseek_v4)
        return
    kinds, why = _kinds(r, imp, n, window)
    if not kinds or not {"sliding", "linear"} & set(kinds):
        return
    if "sliding" not in kinds:  # Gated DeltaNet and full layers only
        imp.set("layer_pattern", _period(kinds), why)
        return
    max_ctx = r.get("max_position_embeddings", 0)
    if max_ctx and window >= max_ctx:
        imp.notes.append(f"sliding_window={window} covers max_position_embeddings={max_ctx}: full attention")
        return
    if "kv_lora_rank" in imp.values:
        imp.unexpressed.append("sliding-window MLA layers: arch=mla has no layer pattern; costed as full")
        return
    imp.set("layer_pattern", _period(kinds), why)
    imp.set(
        "sliding_window", int(window), f"config.json {'attention_chunk_size' if chunk else 'sliding_window'}"
    )
