"""Mamba-2 hybrids in `decodelab import-model` (config.hf_model): NVIDIA's Nemotron-H family (model_type
nemotron_h: Nemotron-H, Nemotron Nano 2, Nemotron 3). Their config.json lists blocks, not decoder layers:
`hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE) or `layers_block_type` (mamba, attention,
mlp, moe), each block one mixer or one FFN behind its own norm and residual (transformers
modeling_nemotron_h.py NemotronHBlock). A decodelab layer is a mixer with the FFN block after it, so the
mixers are the layers (M -> linear, * -> full), the FFN blocks ride on them and the mixers left without one
are `ffn_free_layers`. Mamba-2 shapes (linear_kind mamba2): n_groups -> linear_k_heads, ssm_state_size ->
linear_k_head_dim, mamba_num_heads -> linear_v_heads, mamba_head_dim -> linear_v_head_dim, conv_kernel ->
linear_conv_kernel, mamba_ssm_cache_dtype -> linear_state_dtype. Components: components/models/linear_attn.py."""

from __future__ import annotations

from typing import List

from decodelab.config.hf_reader import positive_int
from decodelab.errors import ConfigError

LETTERS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
MAMBA = {  # config.json key -> ModelConfig field
    "n_groups": "linear_k_heads",
    "ssm_state_size": "linear_k_head_dim",
    "mamba_num_heads": "linear_v_heads",
    "mamba_head_dim": "linear_v_head_dim",
    "conv_kernel": "linear_conv_kernel",
}
STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "bf16"}
UNGATED = ("relu2", "relu", "gelu", "gelu_pytorch_tanh")  # up + down: the schema's `gelu` (two matrices)


def is_nemotron_h(d: dict) -> bool:
    return d.get("model_type") == "nemotron_h" and bool(
        d.get("hybrid_override_pattern") or d.get("layers_block_type")
    )


def with_block_count(d: dict) -> dict:
    """`d` with num_hidden_layers = its blocks where a Nemotron-H config leaves it out (Nemotron 3 Ultra lists
    layers_block_type only); read() sets the layer count from the blocks."""
    if not is_nemotron_h(d) or d.get("num_hidden_layers"):
        return d
    n = len(d.get("hybrid_override_pattern") or d.get("layers_block_type"))
    return {**d, "num_hidden_layers": n}


def blocks(d: dict, path: str) -> List[str]:
    """The block letters (M, *, -, E) in order, from hybrid_override_pattern or layers_block_type."""
    raw = d.get("hybrid_override_pattern")
    letters = (
        list(raw) if isinstance(raw, str) else [LETTERS.get(str(b), str(b)) for b in d["layers_block_type"]]
    )
    bad = sorted({b for b in letters if b not in "M*-E"})
    if bad:
        raise ConfigError(
            f"{path}: block kinds {', '.join(bad)} are not mamba / attention / mlp / moe (M * - E)"
        )
    return letters


def read(r, imp) -> None:
    """Layers, FFN blocks and Mamba-2 shapes of a Nemotron-H config (module docstring)."""
    b = blocks(r.d, imp.path)
    r.get("hybrid_override_pattern")
    r.get("layers_block_type")
    mixers = [("linear" if x == "M" else "full") for x in b if x in "M*"]
    ffn = sum(1 for x in b if x in "-E")
    if ffn > len(mixers):
        raise ConfigError(
            f"{imp.path}: {ffn} FFN blocks for {len(mixers)} mixers: a layer holds at most one FFN block"
        )
    src = f"config.json {len(b)} blocks: {b.count('M')} Mamba-2, {b.count('*')} attention"
    imp.set("n_layers", len(mixers), f"{src} (the mixers; each FFN block rides on one)")
    imp.set("ffn_free_layers", len(mixers) - ffn, f"{src}, {ffn} FFN blocks: mixers without one")
    imp.set("layer_pattern", mixers, f"{src} in order (M -> linear, * -> full)")
    if imp.values.get("n_experts"):
        imp.set(
            "first_dense_layers",
            b.count("-"),
            f"config.json {b.count('-')} MLP (-) and {b.count('E')} MoE blocks",
        )
        _shared(r, imp)
    _mamba(r, imp)
    if r.has("attention_head_dim"):
        imp.set("head_dim", int(r.get("attention_head_dim")), "config.json attention_head_dim")
    act = str(r.get("mlp_hidden_act", "relu2"))
    if act not in UNGATED:
        raise ConfigError(f"config.json mlp_hidden_act={act!r}: one of {', '.join(UNGATED)} (an ungated MLP)")
    imp.set("ffn_act", "gelu", f"config.json mlp_hidden_act {act}: up + down projections (ungated)")
    imp.set("qk_norm", False, "NemotronHAttention has no q/k norm")


def _shared(r, imp) -> None:
    latent = r.get("moe_latent_size")
    if latent:  # LatentMoE: routed experts on the token projected d -> latent; the shared expert at d
        imp.set("moe_latent_dim", int(latent), "config.json moe_latent_size (fc1 / fc2_latent_proj)")
    s_ffn, e_ffn = int(r.get("moe_shared_expert_intermediate_size", 0)), imp.values["expert_ffn_dim"]
    if not s_ffn:
        return
    shared = round(s_ffn / e_ffn)
    imp.set(
        "n_shared_experts",
        shared,
        f"config.json moe_shared_expert_intermediate_size {s_ffn} = {shared} x {e_ffn}",
    )
    if shared * e_ffn != s_ffn:
        imp.unexpressed.append(f"moe_shared_expert_intermediate_size={s_ffn}: costed as {shared} experts")


def _mamba(r, imp) -> None:
    for key, f in MAMBA.items():
        imp.set(f, positive_int(r, key), f"config.json {key}")
    imp.set("linear_kind", "mamba2", "nemotron_h: Mamba-2 mixers (NemotronHMamba2Mixer)")
    raw = str(r.get("mamba_ssm_cache_dtype", "float32"))
    if raw not in STATE_DTYPES:
        raise ConfigError(
            f"config.json mamba_ssm_cache_dtype={raw!r} is not one of: {', '.join(STATE_DTYPES)}"
        )
    why = (
        f"config.json mamba_ssm_cache_dtype {raw}"
        if r.has("mamba_ssm_cache_dtype")
        else "none given: float32"
    )
    imp.set("linear_state_dtype", STATE_DTYPES[raw], why + " (the SSM state)")
    for k in (
        "expand",
        "chunk_size",
        "mamba_hidden_act",
        "mamba_proj_bias",
        "use_conv_bias",
        "time_step_rank",
    ):
        r.get(k)
