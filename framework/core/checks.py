"""Domain validation of a composed config. Every problem is one line naming the field, the value
and what is allowed. Hydra's schema already rejected unknown fields and wrong types."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import FrozenSet, List

from decodelab.components.models.experts import MOE_MAPPINGS, ep_groups
from decodelab.components.models.csa import INDEXED_RATIO
from decodelab.components.models.mla_map import MLA_MAPPINGS
from decodelab.errors import ConfigError, Infeasible
from decodelab.core import parallel, schema, tree
from decodelab.opcost import registry, sampler

# fp8_block: FP8 weights with one FP32 scale per 128 x 128 block (DeepSeek-V3 / Qwen3 FP8 checkpoints;
# the scales add 4 / 16384 B per weight, 0.02%, not counted); its GEMMs run other kernels than
# per-tensor fp8 (a law class of their own, opcost/gemm.py).
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int8": 1.0, "int4": 0.5}
# 4-bit floating point (E2M1 elements) with their block scales, bytes per element:
# fp4: the bare 4-bit elements (scales not counted) = 0.5.
# mxfp4: OCP Microscaling Formats (MX) Specification v1.0 (2023), Sec. 5: blocks of k = 32 FP4
#   (E2M1) elements share one 8-bit E8M0 scale: (32 x 4 + 8) / 32 = 4.25 bits = 0.53125 B.
# nvfp4: NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference" (2025) and
#   the Blackwell documentation: blocks of 16 E2M1 elements share one FP8 (E4M3) scale, plus one FP32
#   scale per tensor (negligible): (16 x 4 + 8) / 16 = 4.5 bits = 0.5625 B.
FP4_DTYPES = ("fp4", "mxfp4", "nvfp4")
DTYPE_BYTES.update({"fp4": 0.5, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8})
EXECUTIONS = ("gpu", "dataflow")
ARCHS_IMPLEMENTED = ("dense", "moe", "mla", "hybrid", "csa")
LAYER_KINDS = ("full", "sliding", "state", "linear", "none")  # hybrid layer_pattern entries
MLA_LAYER_KINDS = ("full", "linear")  # an MLA model's layer_pattern: MLA layers, linear ones (Kimi-K3)
LINEAR_KINDS = ("gdn", "mamba2", "kda")  # model.linear_kind (components/models/linear_attn.py)
ARCHS_KNOWN = ("dense", "moe", "mla", "hybrid", "csa")
FUSIONS = ("auto", "none", "layer")
ORCHESTRATIONS = ("auto", "software", "hardware")
TIER_NAMES = schema.TIER_ORDER
FRACTION_HW = ("bw_eff_max", "compute_eff_max", "sustained_compute_ratio")  # hardware fields in (0, 1]
# hardware fields that must be >= 0
NON_NEGATIVE_HW = (
    "bw_half_mb",
    "compute_half_gflop",
    "launch_us",
    "sync_us",
    "fill_drain_us",
    "route_fill_us",
    "hw_launch_us",
    "host_step_us",
    "collective_latency_us",
    "sample_interval_us",
    "loop_buffer_slots",
    "peak_tflops_fp4",
    "tdp_w",
    "idle_w",
    "price_per_chip_hour",
    "sustained_after_ms",
)


def _positive(errors: List[str], prefix: str, obj, names) -> None:
    for n in names:
        v = getattr(obj, n)
        if not v > 0:
            errors.append(f"{prefix}.{n}={v} must be > 0")


def _choice(errors: List[str], field: str, value, allowed) -> None:
    if value not in allowed:
        errors.append(f"{field}={value!r} is not one of: {', '.join(map(str, allowed))}")


def schema_problems(cfg) -> List[str]:
    """Fields the typed schema cannot catch, on a resolved design (core.tree.Tree): required
    fields left unset (MISSING) and keys added with Hydra's `+` append, which opens a typed node."""
    if not isinstance(cfg, dict):  # an attribute object made by hand (tests): nothing to check
        return []
    e = [
        f"{k} is required but not set (add it to the group's YAML or override {k}=...)"
        for k in sorted(tree.missing_keys(cfg))
    ]
    groups = {
        "model": schema.ModelConfig,
        "hardware": schema.HardwareConfig,
        "workload": schema.WorkloadConfig,
        "optimizations": schema.OptimizationsConfig,
        "kv_policy": schema.KVPolicyConfig,
        "speculative": schema.SpeculativeConfig,
    }
    for g, dc in groups.items():
        if g not in cfg:
            continue
        known = _field_names(dc)
        for k in cfg[g]:
            if k not in known:
                e.append(f"{g}.{k} is not a field of {g}; fields: {', '.join(sorted(known))}")
    return e


@functools.lru_cache(maxsize=None)
def _field_names(dc) -> FrozenSet[str]:
    """The field names of a schema dataclass (read once per class)."""
    return frozenset(f.name for f in dataclasses.fields(dc))


def nonfinite(x, prefix: str = "") -> List[str]:
    """Dotted keys of the NaN and infinite numbers in a config (core.tree.leaf_keys: a design
    made by tree.replace walks only what it changed). No field of the schemas means anything by
    inf or nan (an unbounded value has its own spelling, e.g. 0 = unlimited), so each is refused
    by name wherever it is read."""
    return [tree.join_key(prefix, k) if prefix else k for k in tree.leaf_keys(x, _not_finite)]


def _not_finite(v) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def finite_problems(cfg) -> List[str]:
    """One line per NaN or infinite number of `cfg`."""
    return [f"{k}: not a finite number (nan and inf are refused); give a number" for k in nonfinite(cfg)]


def check_config(cfg) -> None:
    """Raise ConfigError listing every bad field (one line each)."""
    e: List[str] = schema_problems(cfg) or finite_problems(cfg)
    if e:
        raise ConfigError("\n".join(e))
    m, hw, w, opt = cfg.model, cfg.hardware, cfg.workload, cfg.optimizations
    _choice(e, "model.arch", m.arch, ARCHS_KNOWN)
    if m.arch in ARCHS_KNOWN and m.arch not in ARCHS_IMPLEMENTED:
        e.append(
            f"model.arch={m.arch!r} ({m.name}) has no model component yet; implemented: "
            f"{', '.join(ARCHS_IMPLEMENTED)}"
        )
    _positive(
        e,
        "model",
        m,
        ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size", "max_context"),
    )
    if m.n_kv_heads > 0 and m.n_heads > 0 and m.n_heads % m.n_kv_heads:
        e.append(f"model.n_kv_heads={m.n_kv_heads} does not divide model.n_heads={m.n_heads}")
    _choice(e, "model.ffn_act", m.ffn_act, ("swiglu", "gelu"))
    _choice(e, "model.fp8_checkpoint", m.fp8_checkpoint, ("tensor", "block"))
    _check_arch(e, m)

    _choice(e, "hardware.execution", hw.execution, EXECUTIONS)
    _choice(e, "hardware.mla_mapping", getattr(hw, "mla_mapping", "replicated"), MLA_MAPPINGS)
    _choice(e, "hardware.moe_mapping", getattr(hw, "moe_mapping", "tp"), MOE_MAPPINGS)
    _positive(e, "hardware", hw, ("n_chips", "tensor_parallel", "peak_tflops_bf16"))
    if hw.tensor_parallel > 0 and hw.n_chips > 0 and hw.tensor_parallel > hw.n_chips:
        e.append(
            f"hardware.tensor_parallel={hw.tensor_parallel} exceeds hardware.n_chips="
            f"{hw.n_chips} of {hw.name}"
        )
    names = list(hw.memory)
    if "hbm" not in names:
        e.append(
            f"hardware.memory of {hw.name} has no 'hbm' tier (tiers: {', '.join(names) or 'none'}); "
            "weights and KV are placed in hbm first"
        )
    for t in schema.memory_tiers(hw):
        if t.name not in TIER_NAMES:
            e.append(f"hardware.memory.{t.name} is not a memory tier; tiers: {', '.join(TIER_NAMES)}")
        if not t.capacity_gib > 0 or not t.bandwidth_gb_s > 0:
            e.append(
                f"hardware.memory.{t.name} needs capacity_gib > 0 and "
                f"bandwidth_gb_s > 0, got {t.capacity_gib} and {t.bandwidth_gb_s}"
            )
    if hw.tensor_parallel > 1 and not hw.link_bw_gb_s > 0:
        e.append(
            f"hardware.link_bw_gb_s={hw.link_bw_gb_s} must be > 0 when tensor_parallel={hw.tensor_parallel}"
        )
    for n in FRACTION_HW:
        v = getattr(hw, n)
        if not 0 < v <= 1:
            e.append(f"hardware.{n}={v} must be in (0, 1]")
    if not 0 <= hw.attn_compute_eff_max <= 1:
        e.append(
            f"hardware.attn_compute_eff_max={hw.attn_compute_eff_max} must be in [0, 1] "
            "(0: attention runs at compute_eff_max)"
        )
    for n in NON_NEGATIVE_HW:
        if not getattr(hw, n) >= 0:  # also rejects NaN
            e.append(f"hardware.{n}={getattr(hw, n)} must be >= 0")
    if hw.tdp_w > 0 and hw.idle_w > hw.tdp_w:
        e.append(f"hardware.idle_w={hw.idle_w} exceeds hardware.tdp_w={hw.tdp_w} of {hw.name}")

    e += tree.cached(hw, registry.check)  # the chip's operator laws and tables: once per hardware node
    e += sampler.check_request(cfg)
    parallel.check(e, cfg)

    _positive(e, "workload", w, ("batch_size", "prompt_len"))
    if w.output_len < 2:
        e.append(
            f"workload.output_len={w.output_len} must be >= 2 (the prefill emits the "
            "first token; TPOT needs at least one decode step)"
        )
    for n in ("weight_dtype", "kv_dtype", "act_dtype"):
        _choice(e, f"workload.{n}", getattr(w, n), tuple(DTYPE_BYTES))
    _choice(e, "optimizations.fusion", opt.fusion, FUSIONS)
    _choice(e, "optimizations.orchestration", opt.orchestration, ORCHESTRATIONS)
    if opt.schedule_offloading < 1:
        e.append(
            f"optimizations.schedule_offloading={opt.schedule_offloading} must be >= 1 "
            "(decode steps per host round trip; 1 = off)"
        )
    if e:
        raise ConfigError("\n".join(e))


def _check_arch(e: List[str], m) -> None:
    """Fields of the MoE, MLA and hybrid architectures (components/models/layers.py)."""
    if m.arch == "moe" and m.n_experts < 1:
        e.append(f"model.n_experts={m.n_experts} must be >= 1 for arch=moe ({m.name})")
    if m.n_experts > 0:
        if not 1 <= m.experts_per_token <= m.n_experts:
            e.append(f"model.experts_per_token={m.experts_per_token} must be in [1, n_experts={m.n_experts}]")
        if m.expert_ffn_dim < 1:
            e.append(f"model.expert_ffn_dim={m.expert_ffn_dim} must be >= 1 with n_experts > 0")
        if not 0 <= m.first_dense_layers <= m.n_layers - m.ffn_free_layers:
            e.append(
                f"model.first_dense_layers={m.first_dense_layers} must be in [0, n_layers - ffn_free_layers="
                f"{m.n_layers - m.ffn_free_layers}]"
            )
        if m.n_shared_experts < 0:
            e.append(f"model.n_shared_experts={m.n_shared_experts} must be >= 0")
    if m.arch == "mla":
        for n in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(m, n) < 1:
                e.append(f"model.{n}={getattr(m, n)} must be >= 1 for arch=mla ({m.name})")
        if m.q_lora_rank < 0:
            e.append(f"model.q_lora_rank={m.q_lora_rank} must be >= 0 (0: no query compression)")
    elif m.kv_lora_rank and m.arch != "dense":
        e.append(
            f"model.kv_lora_rank={m.kv_lora_rank} is set but model.arch={m.arch!r}; "
            "multi-head latent attention is arch=mla"
        )
    _check_expert_only(e, m)
    if m.experts_per_token > 0 and not m.n_experts > 0:
        e.append(
            f"model.experts_per_token={m.experts_per_token} is set but model.n_experts={m.n_experts} "
            f"({m.name}): top-k routing needs experts (arch=moe with n_experts >= experts_per_token)"
        )
    if m.state_bytes_per_layer > 0 and "state" not in m.layer_pattern:
        e.append(
            f"model.state_bytes_per_layer={m.state_bytes_per_layer} is set but {m.name} has no state "
            f"layers (model.arch={m.arch!r}): a Mamba / SSM model is arch=hybrid with layer_pattern "
            "entries `state`"
        )
    if m.arch == "hybrid" and not m.layer_pattern:
        e.append(
            f"model.layer_pattern is empty for arch=hybrid ({m.name}); give the layer kinds, "
            f"e.g. [sliding, full], from: {', '.join(LAYER_KINDS)}"
        )
    kinds = MLA_LAYER_KINDS if m.arch == "mla" else LAYER_KINDS
    for i, kind in enumerate(m.layer_pattern):
        _choice(e, f"model.layer_pattern[{i}]", kind, kinds)
    if m.attn_res_block_size < 0:
        e.append(f"model.attn_res_block_size={m.attn_res_block_size} must be >= 0 (0: residual adds)")
    if "sliding" in m.layer_pattern and "sliding" in kinds and m.sliding_window < 1:
        e.append(f"model.sliding_window={m.sliding_window} must be >= 1 with sliding layers")
    if "state" in m.layer_pattern and m.state_bytes_per_layer < 1:
        e.append(f"model.state_bytes_per_layer={m.state_bytes_per_layer} must be >= 1 with state layers")
    if "linear" in m.layer_pattern:
        _linear_fields(e, m)
    _check_counts(e, m)
    _check_dsa(e, m)
    _check_csa(e, m)
    _check_global(e, m)


def _check_csa(e: List[str], m) -> None:
    """Compressed attention's fields (components/models/csa.py)."""
    if (m.arch == "csa") != bool(m.compress_ratios):
        have = "set" if m.compress_ratios else "empty"
        e.append(
            f"model.compress_ratios goes with arch=csa (compressed attention): {m.name} has arch={m.arch!r}, compress_ratios {have}"
        )
    if m.arch != "csa":
        return
    if len(m.compress_ratios) < m.n_layers or any(r < 0 for r in m.compress_ratios):
        e.append(f"model.compress_ratios needs n_layers={m.n_layers} entries >= 0 (0: the window only)")
    for n in ("o_groups", "o_lora_rank", "sliding_window", "q_lora_rank", "qk_rope_head_dim"):
        if getattr(m, n) < 1:
            e.append(f"model.{n}={getattr(m, n)} must be >= 1 for arch=csa ({m.name})")
    if m.o_groups >= 1 and m.n_heads % m.o_groups:
        e.append(f"model.o_groups={m.o_groups} must divide n_heads={m.n_heads}")
    if INDEXED_RATIO in m.compress_ratios[: m.n_layers] and m.index_topk < 1:
        e.append("model.index_topk must be >= 1: the ratio-4 layers read their entries through the indexer")
    if m.hc_mult < 0:
        e.append(f"model.hc_mult={m.hc_mult} must be >= 0 (0 or 1: a plain residual stream)")


def _check_global(e: List[str], m) -> None:
    """Full-attention layers of their own shape and the q/k norm's scope (components/models/global_attn.py)."""
    _choice(e, "model.qk_norm_scope", getattr(m, "qk_norm_scope", "head"), ("head", "layer"))
    if (m.global_head_dim or m.global_kv_heads) and "full" not in m.layer_pattern:
        e.append(
            "model.global_head_dim / global_kv_heads shape the full-attention layers: layer_pattern has none"
        )
    if (
        m.global_head_dim < 0
        or m.global_kv_heads < 0
        or (m.global_kv_heads and m.n_heads % m.global_kv_heads)
    ):
        e.append(f"model.global_kv_heads={m.global_kv_heads} must divide n_heads={m.n_heads} (0: n_kv_heads)")


def _check_expert_only(e: List[str], m) -> None:
    """Checkpoints that quantize only the routed experts (model.expert_only_dtypes) and the dtype of the rest."""
    expert_only = getattr(m, "expert_only_dtypes", None) or ()
    for i, dt in enumerate(expert_only):
        _choice(e, f"model.expert_only_dtypes[{i}]", dt, tuple(DTYPE_BYTES))
    _choice(
        e, "model.expert_only_dense_dtype", getattr(m, "expert_only_dense_dtype", "bf16"), tuple(DTYPE_BYTES)
    )
    if expert_only and (m.arch == "dense" or not m.n_experts > 0):  # dense builds no experts
        e.append(
            f"model.expert_only_dtypes is set but {m.name} has no experts "
            f"(model.arch={m.arch!r}, model.n_experts={m.n_experts})"
        )


def _check_counts(e: List[str], m) -> None:
    """Counts of modules and layers beside the decoder layers' shapes."""
    if m.n_mtp_modules < 0:
        e.append(f"model.n_mtp_modules={m.n_mtp_modules} must be >= 0")
    if m.ffn_free_layers < 0 or 0 < m.n_layers <= m.ffn_free_layers:
        e.append(f"model.ffn_free_layers={m.ffn_free_layers} must be in [0, n_layers={m.n_layers})")
    if m.moe_latent_dim < 0 or (m.moe_latent_dim > 0 and m.n_experts < 1):
        e.append(f"model.moe_latent_dim={m.moe_latent_dim} must be 0, or > 0 with experts (n_experts >= 1)")


def _check_dsa(e: List[str], m) -> None:
    """DeepSeek Sparse Attention's fields (components/models/dsa.py): MLA with a lightning indexer."""
    if m.index_topk < 0:
        e.append(f"model.index_topk={m.index_topk} must be >= 0 (0: dense attention)")
    if m.index_topk <= 0:
        return
    if m.arch == "dense":
        e.append(
            f"model.index_topk={m.index_topk} is set but model.arch='dense'; sparse attention is arch=mla "
            "(DeepSeek-V3.2), csa (DeepSeek-V4), or moe / hybrid with GQA (block-sparse: MiniMax-M3)"
        )
    if not 0 <= m.dense_attention_layers < m.n_layers:
        e.append(
            f"model.dense_attention_layers={m.dense_attention_layers} must be in [0, n_layers={m.n_layers})"
        )
    for n in ("index_n_heads", "index_head_dim"):
        if getattr(m, n) < 1:
            e.append(f"model.{n}={getattr(m, n)} must be >= 1 with model.index_topk > 0 ({m.name})")
    if not 0 <= m.index_layers <= m.n_layers:
        e.append(
            f"model.index_layers={m.index_layers} must be in [0, n_layers={m.n_layers}] (0: every layer)"
        )
    if m.layer_pattern:
        e.append("model.layer_pattern must be empty with model.index_topk > 0: every layer attends sparsely")


def _linear_fields(e, m) -> None:
    """Linear layers (layer_pattern `linear`: Gated DeltaNet, KDA or Mamba-2) need their head shapes, state dtype
    and kind."""
    for f in (
        "linear_k_heads",
        "linear_v_heads",
        "linear_k_head_dim",
        "linear_v_head_dim",
        "linear_conv_kernel",
    ):
        if getattr(m, f) < 1:
            e.append(
                f"model.{f}={getattr(m, f)} must be >= 1 with linear (Gated DeltaNet / KDA / Mamba-2) layers"
            )
    _choice(e, "model.linear_state_dtype", m.linear_state_dtype, ("fp32", "bf16"))
    _choice(e, "model.linear_kind", m.linear_kind, LINEAR_KINDS)
    if m.linear_kind == "kda" and (m.linear_k_heads, m.linear_k_head_dim) != (
        m.linear_v_heads,
        m.linear_v_head_dim,
    ):
        e.append(
            f"model.linear_kind=kda needs linear_k_heads = linear_v_heads and linear_k_head_dim = linear_v_head_dim "
            f"(got {m.linear_k_heads} / {m.linear_v_heads} heads of {m.linear_k_head_dim} / {m.linear_v_head_dim})"
        )
    if m.linear_kind != "kda" and m.linear_k_heads >= 1 and m.linear_v_heads % m.linear_k_heads:
        e.append(
            f"model.linear_v_heads={m.linear_v_heads} must be a multiple of "
            f"model.linear_k_heads={m.linear_k_heads}"
        )


def check_feasible(cfg) -> None:
    """Raise Infeasible when a valid design cannot be sharded or is longer than the model allows."""
    m, hw, w = cfg.model, cfg.hardware, cfg.workload
    tp = hw.tensor_parallel
    parallel.check_feasible(cfg)
    # heads split over an attention group's chips (data-parallel attention keeps every head on its chip), an
    # expert's columns over an expert-parallel group's (whole experts under moe_mapping ep / a2a)
    tp_attn = tp // parallel.attention_groups(cfg)
    tp_expert = tp // ep_groups(tp, getattr(hw, "moe_mapping", "tp"), parallel.moe_ep_of(hw))
    if m.n_heads % tp_attn:
        raise Infeasible(f"tensor_parallel={tp_attn} does not divide n_heads={m.n_heads} of {m.name}")
    if m.n_kv_heads % tp_attn and tp_attn % m.n_kv_heads:
        if tp_attn < tp:  # data-parallel attention: the heads of one group's chips
            raise Infeasible(
                f"attention groups of tensor_parallel / attention_dp = {tp_attn} chips do not divide "
                f"kv_heads={m.n_kv_heads} of {m.name} (nor are they a multiple of it)"
            )
        raise Infeasible(
            f"tensor_parallel={tp_attn} does not divide kv_heads={m.n_kv_heads} of {m.name}"
            " (nor is it a multiple of it, for KV-head replication)"
        )
    if m.ffn_dim % tp:
        raise Infeasible(f"tensor_parallel={tp} does not divide ffn_dim={m.ffn_dim} of {m.name}")
    if m.n_experts > 0 and m.expert_ffn_dim % tp_expert:
        raise Infeasible(
            f"tensor_parallel={tp_expert} does not divide expert_ffn_dim={m.expert_ffn_dim} of {m.name}"
        )
    total = w.prompt_len + w.output_len
    # serving workloads check each request they generate (framework/modes/serving/engine_vector.py engine_inputs);
    # a trace or length distributions may not use prompt_len / output_len at all
    if w.get("kind", "static") == "static" and total > m.max_context:
        raise Infeasible(f"prompt_len + output_len = {total} exceeds max_context={m.max_context} of {m.name}")
