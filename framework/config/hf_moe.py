"""The mixture-of-experts keys of a config.json (`decodelab import-model`): the experts (mixtral and gpt-oss
`num_local_experts`, qwen2_moe / qwen3_moe `num_experts`, deepseek `n_routed_experts`), experts per token, the
expert width (`moe_intermediate_size`) and the shared experts (deepseek `n_shared_experts`, Kimi Linear
`num_shared_experts`, qwen2_moe's one wide `shared_expert_intermediate_size`), and the dense layers wherever
transformers places them (`first_k_dense_replace`, `moe_layer_freq`, `decoder_sparse_step`, `mlp_only_layers`,
Llama 4's `moe_layers`): a count. Components: components/models/experts.py."""

from __future__ import annotations

from decodelab.config.hf_reader import Imported, Keys, positive_int
from decodelab.errors import ConfigError


def read(r: Keys, imp: Imported) -> None:
    """The MoE fields: experts, experts per token, the expert and shared-expert widths, the dense layers."""
    key, n = r.first("n_routed_experts", "num_local_experts", "num_experts")
    if not n:
        return
    k_key, k = r.first(
        "num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts", "num_experts_per_token"
    )
    if not k:
        raise ConfigError(f"{imp.path} has {key}={n} but no num_experts_per_tok (experts per token)")
    n, k = positive_int(r, key), positive_int(r, k_key)
    if k > n:
        raise ConfigError(f"config.json {k_key}={k} must be in [1, {key}={n}] (experts chosen per token)")
    imp.set("n_experts", n, f"config.json {key}")
    imp.set("experts_per_token", k, f"config.json {k_key}")
    r.get("experts_per_token")  # gpt-oss repeats num_experts_per_tok under this name
    if r.has("moe_intermediate_size"):
        e_ffn, src = int(r.get("moe_intermediate_size")), "config.json moe_intermediate_size"
    else:
        e_ffn, src = imp.values["ffn_dim"], "config.json intermediate_size (per expert)"
        imp.why["ffn_dim"] += " (per expert; no dense layers)"
    imp.set("expert_ffn_dim", e_ffn, src)
    n_key, shared = r.first("n_shared_experts", "num_shared_experts")  # Kimi Linear: num_shared_experts
    shared, s_why = (
        int(shared or 0),
        f"config.json {n_key}" if n_key else "config.json names no shared expert",
    )
    # qwen2_moe: one wide shared expert (MiniMax-M3 names the key shared_intermediate_size)
    s_key, s_ffn = r.first("shared_expert_intermediate_size", "shared_intermediate_size")
    if s_ffn:
        shared = round(s_ffn / e_ffn)
        s_why = f"config.json {s_key} {s_ffn} = {shared} x {e_ffn} (same weights)"
        if shared * e_ffn != s_ffn:
            imp.unexpressed.append(
                f"{s_key}={s_ffn} is not a multiple of the expert width {e_ffn}: costed as {shared} experts"
            )
    imp.set("n_shared_experts", shared, s_why)
    dense, f_why = _dense_layers(r, imp.values["n_layers"])
    imp.set("first_dense_layers", dense, f_why)


def _moe_layers(r: Keys, n_layers: int):
    """(indices of the MoE layers, the keys that placed them) as transformers builds them: DeepSeek's
    first_k_dense_replace (+ moe_layer_freq as an int), Qwen2/3-MoE's decoder_sparse_step and
    mlp_only_layers, Llama 4's moe_layers / interleave_moe_layer_step, a per-layer moe_layer_freq list."""
    layers, keys = set(range(n_layers)), []
    first = r.get("first_k_dense_replace", 0)
    if first:
        layers -= set(range(int(first)))
        keys.append(f"first_k_dense_replace {first}")
    freq = r.get("moe_layer_freq", 1)
    if isinstance(freq, list):  # one 0/1 flag per layer (MiMo-V2-Flash)
        layers &= {i for i, f in enumerate(freq) if f}
        keys.append(f"moe_layer_freq ({sum(1 for f in freq if f)} of {len(freq)} layers)")
    elif freq != 1:  # DeepSeek-V2: layer_idx % moe_layer_freq == 0
        layers = {i for i in layers if i % int(freq) == 0}
        keys.append(f"moe_layer_freq {freq}")
    step = r.get("decoder_sparse_step", 1)
    if step != 1:  # Qwen2MoeDecoderLayer: (layer_idx + 1) % decoder_sparse_step == 0
        layers = {i for i in layers if (i + 1) % int(step) == 0}
        keys.append(f"decoder_sparse_step {step}")
    only = list(r.get("mlp_only_layers", []) or [])
    if only:
        layers -= set(only)
        keys.append(f"mlp_only_layers {only}")
    listed, inter = r.get("moe_layers"), r.get("interleave_moe_layer_step", 1)
    if listed is not None or inter != 1:  # Llama4TextConfig: range(step - 1, n_layers, step)
        layers &= set(listed) if listed is not None else set(range(int(inter) - 1, n_layers, int(inter)))
        keys.append("moe_layers" if listed is not None else f"interleave_moe_layer_step {inter}")
    return layers, keys


def _dense_layers(r: Keys, n_layers: int):
    """(dense-FFN layers, why): their count, wherever they sit. Every decoder-layer op carries the layer
    average (components/models/experts.py), so a dense layer costs the same at any position."""
    moe, keys = _moe_layers(r, n_layers)
    dense = n_layers - len(moe)
    if not keys:
        return dense, "every layer is MoE (config.json names no dense layers)"
    lead = moe == set(range(dense, n_layers))
    where = "the leading ones" if lead else "interleaved: costed by count, the position changes no step cost"
    return dense, f"config.json {', '.join(keys)}: {dense} dense of {n_layers} layers ({where})"
