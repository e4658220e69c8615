"""Kimi Linear's keys of a config.json (`decodelab import-model`; model_type kimi_linear, Kimi-K3's text_config
inside model_type kimi_k3; Moonshot's modeling_kimi_linear.py, vLLM vllm/models/kimi_k3/nvidia/model.py): the
Kimi Delta Attention layers (`linear_attn_config`: kda_layers and full_attn_layers, 1-based, num_heads x head_dim,
short_conv_kernel_size), the gated MLA of the other layers (`mla_use_output_gate`), the latent MoE
(`routed_expert_hidden_size`) and the attention residuals (`attn_res_block_size`); its MoE keys
(num_experts_per_token, num_shared_experts) are hf_moe's, its gated SiTU activation hf_model's. Components:
components/models/linear_attn.py (kda), mla_attn.py, attn_res.py."""

from __future__ import annotations

from decodelab.config.hf_reader import positive
from decodelab.errors import ConfigError

# keys that change no weight or byte of a step: the NoPE MLA (the rope dims are still projected and cached), the
# latent norm's presence, SiTU's constants, the router's arithmetic, the decay gate's bound
NO_COST = ("mla_use_nope", "latent_moe_use_norm", "activation_situ_beta", "activation_situ_linear_beta",
           "moe_renormalize", "moe_router_activation_func", "routed_scaling_factor", "use_grouped_topk",
           "num_expert_group", "topk_group", "topk_method", "moe_layer_freq")  # fmt: skip


def is_kimi_linear(d: dict) -> bool:
    return isinstance(d.get("linear_attn_config"), dict)


def read(r, imp) -> None:
    """Set the KDA, gate, latent-MoE and attention-residual fields of `imp` from the reader `r` (hf_reader.Keys)."""
    if not is_kimi_linear(r.d):
        return
    la, n = r.get("linear_attn_config"), imp.values["n_layers"]
    kda = {int(i) for i in la.get("kda_layers") or []}
    full = {int(i) for i in la.get("full_attn_layers") or []}
    if kda & full or kda | full != set(range(1, n + 1)):
        raise ConfigError(
            f"{imp.path} linear_attn_config: kda_layers and full_attn_layers must name each of the {n} layers "
            "once (1-based)"
        )
    kinds = ["linear" if i + 1 in kda else "full" for i in range(n)]
    imp.set("layer_pattern", kinds, "linear_attn_config kda_layers (linear) and full_attn_layers, 1-based")
    heads, dim, conv = (
        positive(la.get(k), f"{imp.path} linear_attn_config {k}")
        for k in ("num_heads", "head_dim", "short_conv_kernel_size")
    )
    imp.set("linear_kind", "kda", "linear_attn_config: Kimi Delta Attention layers")
    for f in ("linear_k_heads", "linear_v_heads"):
        imp.set(f, heads, "linear_attn_config num_heads")
    for f in ("linear_k_head_dim", "linear_v_head_dim"):
        imp.set(f, dim, "linear_attn_config head_dim")
    imp.set("linear_conv_kernel", conv, "linear_attn_config short_conv_kernel_size (on q, k, v)")
    imp.set("linear_state_dtype", "fp32", "KDA's recurrent state in float32 (vLLM, SGLang)")
    if not la.get("use_full_rank_gate", False):
        imp.unexpressed.append(
            "linear_attn_config use_full_rank_gate false: the low-rank output gate is costed full rank"
        )
    gate = bool(r.get("mla_use_output_gate", False))
    imp.set("attn_output_gate", gate, f"config.json mla_use_output_gate {str(gate).lower()}")
    latent = int(r.get("routed_expert_hidden_size", 0) or 0)
    if latent and latent != imp.values["d_model"]:
        imp.set("moe_latent_dim", latent, "config.json routed_expert_hidden_size (latent MoE)")
    if r.get("attn_res_block_size", 0):
        imp.set("attn_res_block_size", int(r.get("attn_res_block_size")), "config.json attn_res_block_size")
    for k in NO_COST:
        r.get(k)
