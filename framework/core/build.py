"""Config -> components -> plain arrays for the kernel. Nothing here is Hydra-specific: `cfg` is
any object with attribute access (an OmegaConf node or a SimpleNamespace)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from decodelab.components.execution import EXECUTION_MODELS
from decodelab.components.kv_policy import KV_POLICIES
from decodelab.components.models import ARCHITECTURES
from decodelab.components.models.experts import weight_read
from decodelab.components.ops import Op, keep_bf16, lm_head_dtype
from decodelab.components.placement import GIB, KV_PLACEMENTS, place
from decodelab.core import kv_costs, kv_pool, parallel
from decodelab.core.checks import DTYPE_BYTES, check_config, check_feasible
from decodelab.core.cost_setup import cost_context, engine_family, fp4_note, peak_flops
from decodelab.core.schema import memory_tiers
from decodelab.errors import ConfigError
from decodelab.opcost import registry
from decodelab.opcost.base import Ctx
from decodelab.kernel_layout import CAUSES, Call, Cap, Hw, Law, Lin, M_GRID, N_MGRID, OpPath


@dataclass
class Design:
    """Everything the kernel needs, plus what metrics need to explain the result."""

    op_call: np.ndarray
    op_w: np.ndarray
    op_lin: np.ndarray
    call_rep: np.ndarray
    call_cost: np.ndarray
    tier_bw: np.ndarray
    kv_frac: np.ndarray
    hw: np.ndarray
    ops: List[Op]
    calls: List[dict]
    tier_names: List[str]
    memory: Dict
    weight_bytes_total: float  # whole model, all chips
    weight_bytes_streamed: float  # read every step (no embedding table: gathered by row)
    calls_per_step: float  # kernel calls per step (a looped call counts once)
    kv_bytes_per_token: float  # whole model, all chips
    hbm_bw_total: float  # bytes/s over the tensor-parallel group
    kv_caps: np.ndarray  # KV-policy caps (kernel_layout.Cap), applied to step rows
    notes: List[str] = field(default_factory=list)
    # KV policy and layer-kind costs beyond the caps (framework/core/kv_costs.py)
    kv_read_model: Optional[np.ndarray] = None  # kv_costs.ReadModel: decode rows' attended tokens
    kv_prefill_s: np.ndarray = field(default_factory=lambda: np.zeros(len(CAUSES)))  # per sequence
    max_batch: int = 0  # sequences whose KV slot fits HBM after weights
    kv_slot_bytes_chip: float = 0.0  # one sequence's KV slot, per chip
    kv_slot_bytes_model: float = 0.0  # one sequence's KV slot, whole model
    weights_chip: float = 0.0  # weight bytes held per chip

    def arrays(self):
        return (
            self.op_call,
            self.op_w,
            self.op_lin,
            self.call_rep,
            self.call_cost,
            self.tier_bw,
            self.kv_frac,
            self.hw,
        )


def _lookup(registry: dict, field_name: str, key: str):
    if key not in registry:
        raise ConfigError(f"{field_name}={key!r} is not one of: {', '.join(sorted(registry))}")
    return registry[key]


PATHS = {name.lower(): code for name, code in OpPath}  # Op.path -> op_lin[o, Lin.PATH]


def expert_read_ratios(op: Op) -> np.ndarray:
    """An MoE expert op's weight read at each kernel M_GRID token count over its weight_bytes (the
    read at the design's tokens_per_step): experts.weight_read of its `experts_read` spec."""
    if not op.weight_bytes > 0:
        return np.ones(N_MGRID)
    return np.array([weight_read(op.experts_read, m) / op.weight_bytes for m in M_GRID])


def op_row(op: Op, ctx: Ctx) -> np.ndarray:
    """The op's row of op_lin by column (kernel_layout.Lin): the law columns its operator families
    price (opcost registry: Lin.LAW onwards), its roofline terms per token, per KV token and per
    pair, the sequences it runs for, and an MoE expert op's weight read at the M_GRID token counts."""
    row = np.zeros(Lin.size)
    row[Lin.LAW :] = registry.columns(op, ctx)
    row[Lin.FLOPS_TOK] = op.flops_per_token
    row[Lin.ACT_TOK] = op.act_bytes_per_token
    row[Lin.KV_READ_CTX] = op.kv_read_per_ctx
    row[Lin.KV_WRITE_TOK] = op.kv_write_per_token
    row[Lin.ATTN_FLOPS_CTX] = op.attn_flops_per_ctx
    row[Lin.LINK_TOK] = parallel.link_bytes(op, ctx.hw)  # at collective_link's bandwidth
    row[Lin.NCOLL] = op.n_collectives
    row[Lin.SAMPLED] = 1.0 if op.stage == "post" else 0.0
    row[Lin.FLOPS_CTX] = op.flops_per_ctx
    row[Lin.ACT_CTX] = op.act_bytes_per_ctx
    row[Lin.PATH] = PATHS[op.path]
    row[Lin.REPLICA] = 1.0 if op.replica else 0.0
    if op.experts_read:
        row[Lin.W_TAB] = 1.0  # the weights read follow the step's tokens
        row[Lin.W_RATIO : Lin.W_RATIO + N_MGRID] = expert_read_ratios(op)
    return row


def machine_vector(cfg, act_tier: int, steps_per_trip: float, act_bytes: float) -> np.ndarray:
    """The kernel's machine vector hw (kernel_layout.Hw), every field by name; `act_tier`: the
    memory tier activations live in (HBM), `steps_per_trip`: steps the host's per-step cost is
    spread over. Pipeline fields: core/parallel.py pipeline_fields."""
    hw = cfg.hardware
    bw, lat = parallel.collective_link(hw)  # NVLink, or the network between NVLink domains
    return Hw.vector(
        {
            "peak_flops": peak_flops(hw, cfg.workload.weight_dtype),
            "bw_eff_max": hw.bw_eff_max,
            "bw_half": hw.bw_half_mb * 1e6,
            "c_eff_max": hw.compute_eff_max,
            "c_half": hw.compute_half_gflop * 1e9,
            "attn_rel": kv_costs.attention_efficiency(hw) / hw.compute_eff_max,
            "link_bw": max(bw, 1e-9) * 1e9,
            "coll_lat": lat * 1e-6,
            "host_step": hw.host_step_us * 1e-6 / steps_per_trip,
            "act_tier": act_tier,
            "dp_tokens": 1.0,  # a serving run sets its groups' share (modes/serving/simulate.py)
            "sust_slow": 1.0 / hw.sustained_compute_ratio - 1.0,
            "sust_after": hw.sustained_after_ms * 1e-3,
            **parallel.pipeline_fields(cfg, act_bytes),
        }
    )


def engine_kernels(cfg) -> Dict[str, bool]:
    """The engine's decoder-layer kernels (engine.fused_add_norm, engine.separate_rope; the norms
    inside the all-reduces where the model's engine code fuses them, model.allreduce_norm_engines, or
    the launch does, engine.allreduce_norm) for a GPU design; a dataflow chip's kernels are its
    execution model's fusion (components/execution)."""
    if cfg.hardware.execution == "dataflow":
        return {"fused_add_norm": False, "separate_rope": False, "norm_in_allreduce": False}
    by_model = engine_family(cfg) in (getattr(cfg.model, "allreduce_norm_engines", None) or ())
    return {
        "fused_add_norm": bool(cfg.engine.fused_add_norm),
        "separate_rope": bool(cfg.engine.separate_rope),
        "norm_in_allreduce": by_model or bool(getattr(cfg.engine, "allreduce_norm", False)),
    }


def _ignored_mappings(m, moe_map: str, mapping: str) -> List[str]:
    """Notes for a hardware mapping the model has no part for (MoE experts, MLA attention)."""
    notes = []
    if moe_map != "tp" and not m.n_experts > 0:
        notes.append(
            f"hardware.moe_mapping={moe_map} applies to MoE models only; {m.name} has no experts: ignored"
        )
    if mapping != "replicated" and not m.kv_lora_rank > 0:
        notes.append(
            f"hardware.mla_mapping={mapping} applies to MLA attention only; {m.name} is not MLA: ignored"
        )
    return notes


def dense_weights(m) -> Dict[str, object]:
    """build_ops' dtype of the weights outside the routed experts under model.expert_only_dtypes."""
    dt = getattr(m, "expert_only_dense_dtype", "bf16") or "bf16"
    return {"dense_w_bytes": DTYPE_BYTES[dt], "dense_dtype": dt}


def build(
    cfg, host_round_trip_steps: Optional[int] = None, reserved: Optional[Dict[str, float]] = None
) -> Design:
    """Validate `cfg` and turn it into kernel arrays. Raises ConfigError or Infeasible.
    `host_round_trip_steps` caps the steps one host round trip may cover (speculative decoding
    needs the host after every verification: k + 1 steps). `reserved`: bytes per memory tier and
    chip another model (a speculative draft) already holds (components/placement.py)."""
    check_config(cfg)
    check_feasible(cfg)
    m, hw, w, opt = cfg.model, cfg.hardware, cfg.workload, cfg.optimizations
    arch = _lookup(ARCHITECTURES, "model.arch", m.arch)
    policy = _lookup(KV_POLICIES, "kv_policy.name", cfg.kv_policy.name)
    execution = _lookup(EXECUTION_MODELS, "hardware.execution", hw.execution)
    tp = hw.tensor_parallel
    tiers = memory_tiers(hw)  # by name, nearest first (core.schema.TIER_ORDER)
    wb, ab, kb = (DTYPE_BYTES[w.weight_dtype], DTYPE_BYTES[w.act_dtype], DTYPE_BYTES[w.kv_dtype])
    kv_costs.check_policy(policy, cfg.kv_policy, m)

    mapping, moe_map = getattr(hw, "mla_mapping", "replicated"), getattr(hw, "moe_mapping", "tp")
    expert_only = w.weight_dtype in (getattr(m, "expert_only_dtypes", None) or ())
    ops = arch.build_ops(
        m, tp, wb, ab, kb, tokens_per_step=w.batch_size, mla_mapping=mapping, moe_mapping=moe_map,
        **parallel.arch_kwargs(hw), **parallel.group_kwargs(cfg),
        **(dense_weights(m) if expert_only else {}),
        **engine_kernels(cfg),
    )  # fmt: skip
    ops = keep_bf16(ops, (getattr(m, "quant_bf16_ops", None) or {}).get(w.weight_dtype) or (), wb)
    ops, calls, notes = execution.assign_calls(ops, hw, opt, getattr(cfg, "engine", None))
    notes += fp4_note(hw, w.weight_dtype)
    notes += _ignored_mappings(m, moe_map, mapping)
    steps_per_trip, trip_notes = execution.host_round_trip(opt, host_round_trip_steps)
    notes += trip_notes

    # Memory per chip: weights read by the ops plus the embedding table (only rows are read; kept
    # in the 16-bit compute dtype under quantized weights, like the LM head: components/ops.py).
    # MoE: every expert is held, the activated ones read; tied: the lm_head op reads the shared
    # table; pipeline stages: the chip of each stage holds its layers (core/parallel.py)
    params = arch.param_counts(m)
    embed_wb = lm_head_dtype(wb)[0]
    loads = parallel.stage_loads(cfg, ops, params["embed"] / tp * embed_wb, m.tied_embeddings)
    rm = kv_costs.read_model(policy, cfg.kv_policy, arch, m, kb, tp // parallel.dp_of(hw))
    slot = kv_costs.slot_tokens(policy, cfg.kv_policy, m, w.prompt_len, w.output_len)
    max_cached = kv_costs.memory_fraction(slot, rm)  # layer-averaged tokens one sequence holds
    state = sum(op.state_bytes_per_seq * op.repeat for op in ops)  # per sequence, whatever its length
    # the chip placed: the stage that needs the most memory for this batch
    w_chip, kv_tok_chip = max(loads, key=lambda x: x[0] + w.batch_size * (max_cached * x[1] + state))
    kv_need = w.batch_size * (max_cached * kv_tok_chip + state)
    if getattr(w, "kind", "static") != "static":  # serving: the engine's KV pool; admission decides
        # (pipeline stages: the stage whose pool holds the fewest tokens bounds the whole pipeline)
        i, kv_need, pool_notes = kv_pool.serving_pool(cfg, tiers, loads, ops, ab, state)
        (w_chip, kv_tok_chip), notes = loads[i], notes + pool_notes
    placement = getattr(w, "kv_placement", "hbm")
    if placement not in KV_PLACEMENTS:
        raise ConfigError(f"workload.kv_placement={placement!r} is not one of: {', '.join(KV_PLACEMENTS)}")
    mem = place(tiers, w_chip, kv_need, placement, reserved)
    notes += mem["notes"]
    # KV per token of the chip placed (its stage's layers); the linear layers' states of one sequence
    mem.update(kv_pool_bytes=kv_need, kv_bytes_per_token_chip=kv_tok_chip, state_bytes_per_seq=state)

    tier_names = [t.name for t in tiers]
    n_t = len(tier_names)
    op_w = np.zeros((len(ops), n_t))
    op_lin = np.zeros((len(ops), Lin.size))
    ctx = cost_context(cfg)  # what the operator families price the ops with (decodelab.opcost)
    for i, op in enumerate(ops):
        op_w[i] = np.asarray(mem["weight_frac"]) * op.weight_bytes
        op_lin[i] = op_row(op, ctx)
    call_cost = np.zeros((len(calls), Call.size))
    stages = parallel.call_stages(ops, len(calls))
    for c, call in enumerate(calls):  # the execution model's call dict names every column
        call_cost[c] = Call.vector({**call, "stage": stages[c]})
    # a call costed by a fitted law: its t0 (measured in a CUDA graph) holds the kernel boundary
    law_calls = {op.call for i, op in enumerate(ops) if op_lin[i, Lin.LAW] != Law.NONE}
    for c in law_calls:
        if sum(op.call == c for op in ops) > 1:
            raise ConfigError(
                f"hardware.op_model=fitted: kernel call {c} holds several ops; the fitted laws "
                "cost one kernel per op (hardware.execution=gpu)"
            )
        call_cost[c, Call.LAUNCH_EACH] = calls[c].get("boundary_each", 0.0)  # t0 replaces sync_us only
    notes += registry.run_notes(ops, ctx)
    pk = policy.kernel_params(cfg.kv_policy, m)
    hwv = machine_vector(cfg, tier_names.index("hbm"), steps_per_trip, ab)
    hbm = tiers[tier_names.index("hbm")]
    return Design(
        op_call=np.array([op.call for op in ops], dtype=np.int64),
        op_w=op_w,
        op_lin=op_lin,
        call_rep=np.array([c["repeat"] for c in calls], dtype=np.float64),
        call_cost=call_cost,
        tier_bw=np.array([t.bandwidth_gb_s * 1e9 for t in tiers]),
        kv_frac=np.asarray(mem["kv_frac"], dtype=np.float64),
        hw=hwv,
        ops=ops,
        calls=calls,
        tier_names=tier_names,
        memory=mem,
        # the embedding table and the LM head at their own (16-bit) bytes under quantized weights
        weight_bytes_total=params["total"] * wb + (params["embed"] + params["lm_head"]) * (embed_wb - wb),
        weight_bytes_streamed=(
            arch.streamed_params(m, w.batch_size)
            if hasattr(arch, "streamed_params")
            else params["total"] - (0 if m.tied_embeddings else params["embed"])
        )
        * wb
        + (params["embed"] if m.tied_embeddings else params["lm_head"]) * (embed_wb - wb),
        # a decode step's calls (a call whose ops all run only for prefilling sequences is not one)
        calls_per_step=float(
            sum(
                1 if c.get("looped", c["launch_once"] or c["fill_once"]) else c["repeat"]
                for i, c in enumerate(calls)
                if any(
                    op.call == i and op.path != "prefill" and op_lin[j, Lin.LAW] != Law.SKIP
                    for j, op in enumerate(ops)
                )
            )
        ),
        kv_bytes_per_token=arch.kv_bytes_per_token(m, kb),
        hbm_bw_total=parallel.replica_chips(hw) * hbm.bandwidth_gb_s * 1e9,
        kv_caps=Cap.vector(pk),
        notes=notes,
        kv_read_model=rm,
        max_batch=min(
            kv_costs.max_batch(hbm.capacity_gib * GIB, wc, max_cached * kc + state) for wc, kc in loads
        ),
        kv_slot_bytes_chip=max_cached * kv_tok_chip + state,
        weights_chip=w_chip,
        kv_slot_bytes_model=max_cached * arch.kv_bytes_per_token(m, kb),
        kv_prefill_s=kv_costs.prefill_seconds(
            policy,
            cfg.kv_policy,
            m,
            w.prompt_len,
            tp,
            hw,
            hwv[Hw.PEAK_FLOPS],
            hbm.bandwidth_gb_s * 1e9,
            kb,
            ab,
        ),
    )
