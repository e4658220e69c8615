"""DeepSeek-V4's keys of a config.json (`decodelab import-model`; model_type `deepseek_v4`): the per-layer
`compress_ratios` (the main layers', then the MTP layer's), the window every layer keeps (`sliding_window`),
the grouped low-rank output (`o_groups`, `o_lora_rank`), the hyper-connection streams (`hc_mult`), the
query LoRA and RoPE widths, and the routed experts' dtype (`expert_dtype` fp4: MXFP4 experts beside
FP8-block weights). The indexer's keys are hf_dsa's. Keys that change no cost are read and named.
Model: components/models/csa.py."""

from __future__ import annotations

from decodelab.errors import ConfigError

# read, no cost of their own: hash routing of the first layers (the gate GEMM still runs), routing and
# activation details, the Sinkhorn's iterations and epsilon, the compressed layers' RoPE base
NO_COST = (
    "num_hash_layers",
    "scoring_func",
    "topk_method",
    "norm_topk_prob",
    "routed_scaling_factor",
    "swiglu_limit",
    "hc_eps",
    "hc_sinkhorn_iters",
    "compress_rope_theta",
)


def is_v4(d: dict) -> bool:
    return bool(d.get("compress_ratios"))


def read(r, imp) -> None:
    """Set the compressed-attention fields of `imp` from the config.json reader `r` (hf_reader.Keys)."""
    if not is_v4(r.d):
        return
    ratios = [int(x) for x in r.get("compress_ratios")]
    n = imp.values["n_layers"]
    if len(ratios) < n:
        raise ConfigError(f"{imp.path} compress_ratios has {len(ratios)} entries for num_hidden_layers={n}")
    need = [
        k
        for k in ("o_groups", "o_lora_rank", "q_lora_rank", "qk_rope_head_dim", "sliding_window")
        if not r.get(k)
    ]
    if need:
        raise ConfigError(
            f"{imp.path} has compress_ratios but no {', '.join(need)} (required for compressed attention)"
        )
    extra = len(ratios) - n
    imp.set(
        "compress_ratios",
        ratios,
        "config.json compress_ratios" + (f" (the last {extra}: MTP)" if extra else ""),
    )
    imp.set(
        "sliding_window", int(r.get("sliding_window")), "config.json sliding_window: every layer keeps it"
    )
    for k in ("o_groups", "o_lora_rank", "q_lora_rank", "qk_rope_head_dim"):
        imp.set(k, int(r.get(k)), f"config.json {k}")
    imp.set("hc_mult", int(r.get("hc_mult", 0) or 0), "config.json hc_mult")
    imp.set("n_kv_heads", 1, "config.json num_key_value_heads 1: one KV vector, key and value at once")
    if str(r.get("expert_dtype") or "") == "fp4":
        imp.set(
            "expert_only_dtypes", ["mxfp4", "nvfp4"], "config.json expert_dtype fp4: MXFP4 routed experts"
        )
        imp.set("expert_only_dense_dtype", "fp8_block", "the other weights FP8 block (quantization_config)")
    imp.why["ffn_dim"] = "no dense FFN layer (every layer is MoE): config.json moe_intermediate_size"
    for k in NO_COST:
        r.get(k)
