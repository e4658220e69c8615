"""Gated DeltaNet hybrids in `decodelab import-model` (config.hf_model): Qwen3-Next (model_type
qwen3_next) and Qwen3.5 / Qwen3.6 (qwen3_5_text, qwen3_5_moe_text inside a multimodal config's
text_config). Their config.json names the linear layers' shapes (linear_num_key_heads,
linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim,
mamba_ssm_dtype) and the layer kinds (layer_types linear_attention / full_attention, or
full_attention_interval); their attention is gated (attn_output_gate; Qwen3-Next's code gates
always) and their shared expert has a sigmoid gate (transformers modeling_qwen3_next.py,
modeling_qwen3_5_moe.py: shared_expert_gate). Components: components/models/linear_attn.py."""

from __future__ import annotations

from typing import List, Optional

from decodelab.config.hf_reader import positive_int
from decodelab.errors import ConfigError

KEYS = {  # config.json key -> ModelConfig field
    "linear_num_key_heads": "linear_k_heads",
    "linear_num_value_heads": "linear_v_heads",
    "linear_key_head_dim": "linear_k_head_dim",
    "linear_value_head_dim": "linear_v_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel",
}
FIELDS = (*KEYS.values(), "linear_state_dtype", "attn_output_gate", "shared_expert_gate")
STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "bf16"}
ALWAYS_GATED = ("qwen3_next",)  # Qwen3NextAttention builds q_proj of 2 x heads x head_dim whatever the config


def is_gated_deltanet(d: dict) -> bool:
    """A config.json whose linear layers are Gated DeltaNet ones the schema expresses."""
    return all(d.get(k) for k in KEYS)


def kinds(r, n: int) -> Optional[List[str]]:
    """Layer kinds from full_attention_interval when config.json has no layer_types (Qwen3-Next:
    layer i is full attention when (i + 1) % interval == 0, transformers Qwen3NextConfig)."""
    if not (r.has("full_attention_interval") and is_gated_deltanet(r.d)):
        return None
    k = int(r.get("full_attention_interval"))
    return ["full" if (i + 1) % k == 0 else "linear" for i in range(n)]


def read(r, imp) -> None:
    """The Gated DeltaNet fields, the attention gate and the shared-expert gate."""
    if not is_gated_deltanet(r.d):
        return
    for key, f in KEYS.items():
        imp.set(f, positive_int(r, key), f"config.json {key}")
    if imp.values["linear_v_heads"] % imp.values["linear_k_heads"]:
        raise ConfigError(
            f"config.json linear_num_value_heads={imp.values['linear_v_heads']} must be a multiple of "
            f"linear_num_key_heads={imp.values['linear_k_heads']}"
        )
    raw = str(r.get("mamba_ssm_dtype", "float32"))
    if raw not in STATE_DTYPES:
        raise ConfigError(f"config.json mamba_ssm_dtype={raw!r} is not one of: {', '.join(STATE_DTYPES)}")
    why = "config.json mamba_ssm_dtype " + raw if r.has("mamba_ssm_dtype") else "no mamba_ssm_dtype: float32"
    imp.set("linear_state_dtype", STATE_DTYPES[raw], why + " (the recurrent state)")
    gated = bool(r.get("attn_output_gate", imp.model_type in ALWAYS_GATED))
    src = (
        "config.json attn_output_gate"
        if "attn_output_gate" in r.d
        else f"{imp.model_type}: gated q_proj in the code"
    )
    imp.set("attn_output_gate", gated, f"{src} {str(gated).lower()}")
    if imp.values.get("n_shared_experts"):
        imp.set("shared_expert_gate", True, "shared_expert_gate (hidden -> 1, sigmoid) in the code")
    mtp = r.get("mtp_num_hidden_layers", 0)
    if mtp:
        imp.set("n_mtp_modules", int(mtp), "config.json mtp_num_hidden_layers")
    r.get("full_attention_interval")
    r.get("mtp_use_dedicated_embeddings")
