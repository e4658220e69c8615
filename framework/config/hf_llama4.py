"""Llama 4 in `decodelab import-model` (config.hf_model): model_type llama4_text (Scout, Maverick; inside a
multimodal config's text_config). transformers' Llama4TextConfig and modeling_llama4.py: `intermediate_size` is an
expert's width and the shared expert's (Llama4TextMoe builds one beside the routed ones), `intermediate_size_mlp`
the dense layers' MLP; `attention_chunk_size` makes the RoPE layers attend within their chunk and the others
(`no_rope_layers` 0; by default every `no_rope_layer_interval` = 4th layer) attend globally without RoPE. A chunk
layer is written as a sliding window of the chunk size: exact until the first chunk boundary, up to 2x the mean
read beyond it (conf/model/llama4_scout_17b_16e.yaml)."""

from __future__ import annotations

from typing import List, Optional

TYPES = ("llama4_text",)
NO_ROPE_INTERVAL = 4  # Llama4TextConfig no_rope_layer_interval default


def is_llama4(model_type: str) -> bool:
    return model_type in TYPES


def chunk(r, model_type: str) -> int:
    """The attention chunk (config.json attention_chunk_size) of a Llama 4 config, else 0: config.hf_model
    writes it as the sliding window of the chunked layers."""
    return int(r.get("attention_chunk_size") or 0) if is_llama4(model_type) else 0


def chunk_kinds(r, n: int) -> Optional[List[str]]:
    """Per layer: sliding (a RoPE layer attending within its chunk) or full (no RoPE, global); None without
    a chunk."""
    if not r.get("attention_chunk_size"):
        return None
    rope = r.get("no_rope_layers") or [int((i + 1) % NO_ROPE_INTERVAL != 0) for i in range(n)]
    return ["sliding" if use else "full" for use in rope]


def read(r, imp) -> None:
    """The dense MLP width, the experts' and the shared expert (the chunked-attention layers: config.hf_model
    _kinds with chunk_kinds)."""
    if not is_llama4(imp.model_type):
        return
    if r.has("intermediate_size_mlp"):
        imp.set(
            "ffn_dim",
            int(r.get("intermediate_size_mlp")),
            "config.json intermediate_size_mlp (the dense layers' MLP)",
        )
    if imp.values.get("n_experts"):
        imp.set(
            "expert_ffn_dim",
            int(r.get("intermediate_size")),
            "config.json intermediate_size (an expert's width)",
        )
        imp.set(
            "n_shared_experts",
            1,
            "Llama4TextMoe: one shared expert of intermediate_size beside the routed ones",
        )
