"""Gemma 4's keys of a config.json (`decodelab import-model`; model_type `gemma4_text`, the text model of
`gemma4`; transformers configuration_gemma4.py, modeling_gemma4.py): the full-attention layers' own head
dim and KV heads (`global_head_dim`, `num_global_key_value_heads`), their missing v_proj
(`attention_k_eq_v`), and with `enable_moe_block` a dense MLP beside the routed experts in every layer
(Gemma4TextDecoderLayer: the two branches summed), written as shared experts of the experts' width
(intermediate_size / moe_intermediate_size: 2112 / 704 = 3 for the 26B-A4B). Keys that change no cost
are read and named. Model: components/models/global_attn.py."""

from __future__ import annotations

from decodelab.errors import ConfigError

# read, no cost here: per-layer input embeddings (off at hidden_size_per_layer_input 0), the double-wide MLP
# of KV-shared layers (none at num_kv_shared_layers 0), the vision tower's bidirectional attention, RoPE
NO_COST = (
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
    "use_double_wide_mlp",
    "use_bidirectional_attention",
    "rope_parameters",
    "enable_moe_block",
)


def is_gemma4(model_type: str) -> bool:
    return model_type == "gemma4_text"


def read(r, imp) -> None:
    """Set the Gemma 4 fields of `imp` from the config.json reader `r` (hf_reader.Keys)."""
    if not is_gemma4(imp.model_type):
        return
    if r.get("hidden_size_per_layer_input", 0):
        raise ConfigError(
            f"{imp.path} has per-layer input embeddings (hidden_size_per_layer_input): not modelled"
        )
    if r.get("global_head_dim"):
        imp.set("global_head_dim", int(r.get("global_head_dim")), "config.json global_head_dim (full layers)")
    if r.get("num_global_key_value_heads"):
        g = int(r.get("num_global_key_value_heads"))
        imp.set("global_kv_heads", g, "config.json num_global_key_value_heads (full layers)")
    if r.get("attention_k_eq_v"):
        imp.set("global_k_eq_v", True, "config.json attention_k_eq_v: the full layers have no v_proj")
    if r.get("enable_moe_block") and imp.values.get("n_experts"):
        dense, e_ffn = int(r.get("intermediate_size")), imp.values["expert_ffn_dim"]
        if dense % e_ffn:
            raise ConfigError(
                f"{imp.path} intermediate_size={dense} beside the experts is not a multiple of "
                f"moe_intermediate_size={e_ffn}"
            )
        why = f"the dense MLP beside the experts (enable_moe_block): intermediate_size {dense} = {dense // e_ffn} x {e_ffn}"
        imp.set("n_shared_experts", dense // e_ffn, why)
    for k in NO_COST:
        r.get(k)
