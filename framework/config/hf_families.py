"""What `decodelab import-model` knows of each Hugging Face `model_type` beyond its config.json
(config.hf_model reads the file): the defaults transformers' configuration class applies when a key
is absent (tie_word_embeddings above all: PretrainedConfig ties by default, most decoder configs
override it to False, Gemma's keep True), the code-level facts config.json does not state (q/k/v
biases, q/k norms, a gated GELU), and the families it refuses (state-space / linear-attention
layers it would otherwise write as attention, other than the Gated DeltaNet and Nemotron-H hybrids it
reads), and the precision a checkpoint ships in
(`quantization_config`: a note naming the workload.weight_dtype to run it with).

Every default is the keyword default of the class `<Family>Config` in transformers'
`src/transformers/models/<model_type>/configuration_<model_type>.py` (read on the main branch,
2025-26), named in the YAML comment of the field it sets."""

from __future__ import annotations

from typing import Dict, Iterable, Optional

from decodelab.errors import ConfigError

# model_type -> transformers' tie_word_embeddings default (None: the importer knows the family but
# not its default, so config.json must state it)
TIE_DEFAULT: Dict[str, Optional[bool]] = {
    **dict.fromkeys(
        "llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe phi phi3 deepseek_v2 deepseek_v3 olmo "
        "olmo2 olmoe gpt_oss granite qwen3_next qwen3_5_text qwen3_5_moe_text mimo mimo_v2_flash nemotron_h nemotron-nas "
        "llama4_text".split(),
        False,
    ),
    **dict.fromkeys("gemma gemma2 gemma3_text gemma4_text starcoder2 cohere".split(), True),
    **dict.fromkeys(
        "minimax_m2 qwen2_vl qwen2_5_vl qwen3_vl_text qwen3_vl_moe_text deepseek_v32 glm_moe_dsa ministral deepseek_v4 minimax_m3 kimi_linear".split(),
        None,
    ),
}
# keys a family's configuration class fills in when config.json omits them (only those that shape
# the model; Gemma-3's multimodal checkpoints leave most of text_config to these)
DEFAULTS: Dict[str, Dict[str, object]] = {
    "mistral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "gemma": {"head_dim": 256},
    "gemma2": {
        "head_dim": 256,
        "sliding_window": 4096,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    "gemma3_text": {
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}
# layer_types a family builds when config.json has none: sliding on even layers, full on odd ones
ALTERNATING = ("gemma2", "gpt_oss")
GEGLU_TYPES = (
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gemma4_text",
)  # gated GELU: 3 matrices, like swiglu
# q/k/v bias=True in the code (Xiaomi's MiMo: modeling_mimo.py MiMoModel subclasses Qwen2Model, adding MTP layers)
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "mimo")
# per-head q_norm / k_norm in the code (Qwen3-VL's language model: Qwen3VLTextAttention / Qwen3VLMoeTextAttention)
QK_NORM_TYPES = (
    "qwen3",
    "qwen3_moe",
    "qwen3_vl_text",
    "qwen3_vl_moe_text",
    "gemma3",
    "gemma3_text",
    "gemma4_text",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
)
# families whose layers (some or all) keep a recurrent state instead of a KV cache
STATE_SPACE = {
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba"), "a state-space (Mamba) model"),
    **dict.fromkeys(("rwkv", "rwkv5", "rwkv6", "rwkv7", "xlstm", "recurrent_gemma"), "a recurrent model"),
    **dict.fromkeys(
        ("jamba", "zamba", "zamba2", "bamba", "falcon_h1", "nemotron_h", "granitemoehybrid", "plamo2"),
        "a hybrid of attention and Mamba layers",
    ),
    **dict.fromkeys(
        ("qwen3_next", "minimax", "lfm2", "kimi_linear"), "a hybrid with linear-attention layers"
    ),
}
STATE_KEYS = (
    "ssm_state_size",
    "state_size",
    "mamba_d_state",
    "d_state",
    "linear_attn_config",
    "linear_num_key_heads",
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_layer_indices",
)
# keys that shape neither the weights nor the bytes of decode (token ids, precision, RoPE, dropout,
# norm epsilons, initialisation, routing arithmetic): an unknown model_type may carry them
HARMLESS = set(
    "architectures auto_map _name_or_path torch_dtype dtype transformers_version use_cache bos_token_id "
    "eos_token_id pad_token_id initializer_range rms_norm_eps layer_norm_eps layer_norm_epsilon norm_epsilon "
    "rope_theta rope_scaling rope_parameters rope_interleave partial_rotary_factor use_mrope attention_dropout "
    "hidden_dropout dropout resid_pdrop embd_pdrop output_router_logits router_aux_loss_coef "
    "router_jitter_noise pretraining_tp norm_topk_prob routed_scaling_factor scoring_func topk_method "
    "n_group topk_group tokenizer_class quantization_config generation_config".split()
)


def known() -> str:
    return ", ".join(sorted(TIE_DEFAULT))


def defaults(model_type: str) -> Dict[str, object]:
    return dict(DEFAULTS.get(model_type, {}))


def refuse_state_space(model_type: str, keys: Iterable[str], path: str) -> None:
    """A state-space, recurrent or linear-attention model other than the hybrids the importer reads (Gated
    DeltaNet: hf_linear.py; Nemotron-H's Mamba-2: hf_mamba.py; the caller checks those first) is refused (the
    schema's `state` layer kind needs a state size and weights it does not map)."""
    if model_type in STATE_SPACE:
        raise ConfigError(
            f"{path} model_type={model_type} is {STATE_SPACE[model_type]}: import-model writes attention "
            f"decoders and the Gated DeltaNet and Nemotron-H hybrids only (model_type one of {known()})"
        )
    hit = [k for k in STATE_KEYS if k in set(keys)]
    if hit:
        raise ConfigError(
            f"{path} has {hit[0]} (a state-space / linear-attention layer): import-model writes attention "
            "layers (full_attention, sliding_attention) and the Gated DeltaNet and Nemotron-H hybrids' only"
        )


def tie(model_type: str, outer: Optional[dict], path: str):
    """(tied, why) when config.json has no tie_word_embeddings: the outer (multimodal) config's key,
    else the family's transformers default; ConfigError when neither is known."""
    if outer is not None and outer.get("tie_word_embeddings") is not None:
        t = bool(outer["tie_word_embeddings"])
        return t, f"config.json tie_word_embeddings {str(t).lower()} (outer config)"
    default = TIE_DEFAULT.get(model_type)
    if default is None:
        raise ConfigError(
            f"{path} has no tie_word_embeddings and model_type={model_type} has no default known to "
            'import-model: add "tie_word_embeddings": true or false'
        )
    cls = f"configuration_{model_type.removesuffix('_text')}.py"  # a text_config's class sits in its family's file
    return default, (
        f"config.json has no tie_word_embeddings: {model_type} default {str(default).lower()} "
        f"(transformers {cls})"
    )


def check_unknown(model_type: str, unused: Iterable[str], path: str) -> Optional[str]:
    """An unknown model_type is read as a Llama-like decoder only when every key it carries is read
    or harmless; else ConfigError naming the keys. Returns the note for the YAML, or None."""
    if model_type in TIE_DEFAULT:
        return None
    left = sorted(k for k in unused if k not in HARMLESS and not k.startswith("(outer)"))
    if left:
        raise ConfigError(
            f"{path} model_type={model_type} is not known to import-model and has fields it cannot map: "
            f"{', '.join(left)} (model_type one of {known()})"
        )
    return f"model_type {model_type} is not known to import-model: read as a Llama-like decoder"


def softcap_notes(r_get, has) -> list:
    """Soft-capping (Gemma-2): tanh(x / c) * c on the attention scores and the final logits, a few
    elementwise FLOPs: no field in the schema, weights and bytes unchanged."""
    out = []
    for k, what in (
        ("attn_logit_softcapping", "attention scores"),
        ("final_logit_softcapping", "final logits"),
    ):
        if has(k):
            out.append(f"{k}={r_get(k)}: tanh soft-capping of the {what} (not costed: bytes unchanged)")
    return out


def dtype(r, imp) -> None:
    """Precisions are workload fields (workload.weight_dtype / kv_dtype): a note, not a field."""
    _, td = r.first("torch_dtype", "dtype")
    q = r.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower() if isinstance(q, dict) else ""
    algo = str(q.get("quant_algo", "")).upper() if isinstance(q, dict) else ""
    if method == "mxfp4":
        keep = [str(x) for x in (q.get("modules_to_not_convert") or [])]
        experts_only = any("attn" in x for x in keep)  # gpt-oss: attention / router / embeddings BF16
        if experts_only:
            imp.set(
                "expert_only_dtypes",
                ["mxfp4"],
                "config.json quantization_config modules_to_not_convert: only the experts are MXFP4",
            )
        imp.notes.append(
            "weights ship in MXFP4 (quantization_config; modules_to_not_convert stay 16-bit): "
            "run with workload.weight_dtype=mxfp4"
            + ("" if experts_only else " (every weight at 4.25 bits: a lower bound)")
        )
    elif "NVFP4" in algo or method == "nvfp4":
        imp.notes.append("weights ship in NVFP4 (quantization_config): run with workload.weight_dtype=nvfp4")
    elif (method == "fp8" or "FP8" in algo) and isinstance(q, dict) and q.get("weight_block_size"):
        imp.set(
            "fp8_checkpoint",
            "block",
            f"config.json quantization_config weight_block_size {q['weight_block_size']}: block-scaled FP8",
        )
        imp.notes.append(
            "weights ship in block-scaled FP8 (quantization_config): run with workload.weight_dtype=fp8_block"
        )
    elif method == "fp8" or "FP8" in algo:
        imp.notes.append("weights ship in FP8 (quantization_config): run with workload.weight_dtype=fp8")
    elif method in ("awq", "gptq") and q.get("bits") == 4:
        imp.notes.append(f"weights ship in 4-bit {method.upper()}: run with workload.weight_dtype=int4")
    elif method:
        imp.notes.append(f"quantization_config quant_method={method}: not mapped; set workload.weight_dtype")
    elif td:
        imp.notes.append(f"weights in {td} (workload.weight_dtype=bf16 is the default)")
