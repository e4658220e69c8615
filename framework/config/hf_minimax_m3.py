"""MiniMax-M3's keys of a config.json (`decodelab import-model`; model_type `minimax_m3`; vLLM models/minimax_m3,
SGLang minimax_m3.py, TensorRT-LLM modeling_minimaxm3.py): its block-sparse attention (`sparse_attention_config`:
each KV head reads the top `sparse_topk_blocks` blocks of `sparse_block_size` tokens an indexer of
`sparse_num_index_heads` x `sparse_index_dim` picks, in the layers `sparse_attention_freq` marks; the leading
dense ones attend densely) and the leading dense layers' MLP (`dense_intermediate_size`); the shared expert's
width (`shared_intermediate_size`) is hf_moe's. Model: components/models/msa.py."""

from __future__ import annotations

from decodelab.errors import ConfigError

NO_COST = ("use_gemma_norm", "qk_norm_type", "rotary_dim", "swiglu_alpha", "swiglu_limit", "use_routing_bias",
           "attention_output_gate", "num_mtp_modules", "partial_rotary_factor")  # fmt: skip


def is_minimax_m3(d: dict) -> bool:
    return isinstance(d.get("sparse_attention_config"), dict)


def read(r, imp) -> None:
    """Set the block-sparse attention fields of `imp` from the config.json reader `r` (hf_reader.Keys)."""
    if not is_minimax_m3(r.d):
        return
    sc = r.get("sparse_attention_config")
    freq = [int(x) for x in sc.get("sparse_attention_freq") or []]
    dense = next((i for i, x in enumerate(freq) if x), len(freq))
    if not sc.get("use_sparse_attention") or not freq or any(x == 0 for x in freq[dense:]):
        raise ConfigError(
            f"{imp.path} sparse_attention_config: sparse layers must follow the dense ones (not modelled)"
        )
    if any(not int(x) for x in (sc.get("sparse_disable_index_value") or [])[dense:]):
        raise ConfigError(
            f"{imp.path} sparse_attention_config: an indexer with values of its own is not modelled"
        )
    need = [
        k for k in ("sparse_topk_blocks", "sparse_block_size", "sparse_num_index_heads", "sparse_index_dim")
    ]
    if any(not sc.get(k) for k in need):
        raise ConfigError(
            f"{imp.path} sparse_attention_config needs {', '.join(need)} (block-sparse attention)"
        )
    if int(sc.get("sparse_init_block", 0)):
        raise ConfigError(f"{imp.path} sparse_attention_config: initial blocks are not modelled")
    topk = int(sc["sparse_topk_blocks"]) * int(sc["sparse_block_size"])
    imp.set(
        "index_topk",
        topk,
        "sparse_attention_config sparse_topk_blocks x sparse_block_size (tokens a KV head reads)",
    )
    imp.set(
        "index_n_heads", int(sc["sparse_num_index_heads"]), "sparse_attention_config sparse_num_index_heads"
    )
    imp.set("index_head_dim", int(sc["sparse_index_dim"]), "sparse_attention_config sparse_index_dim")
    imp.set(
        "dense_attention_layers", dense, "sparse_attention_config sparse_attention_freq (leading 0s: dense)"
    )
    if r.get("dense_intermediate_size"):
        imp.set(
            "ffn_dim",
            int(r.get("dense_intermediate_size")),
            "config.json dense_intermediate_size (the dense layers)",
        )
    for k in NO_COST:
        r.get(k)
