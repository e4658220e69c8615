"""Parallelism beyond tensor parallelism, as config checks, kernel scalars and per-stage memory
(docs/model.md, "Parallelism beyond tensor parallelism"). Pipeline parallelism
(`hardware.pipeline_parallel` = pp): the decoder layers are split over pp stages (core/pipeline.py
`layer_split`), each a group of `tensor_parallel` chips holding its layers' weights and KV; a
replica is tp x pp chips. The step time is composed in the kernel (core/pipeline.py); this module
fills its scalars and says where pipeline parallelism is not modelled."""

from __future__ import annotations

from typing import Dict, List, Tuple

from decodelab.core.pipeline import Stage, layer_split
from decodelab.errors import Infeasible


def pp_of(hw) -> int:
    return int(getattr(hw, "pipeline_parallel", 1))


def replica_chips(hw) -> int:
    """Chips one model replica occupies: tensor_parallel x pipeline_parallel."""
    return hw.tensor_parallel * pp_of(hw)


def replicas(hw) -> int:
    return hw.n_chips // replica_chips(hw)


def dp_of(hw) -> int:
    return int(getattr(hw, "attention_dp", 1))


def arch_kwargs(hw) -> dict:
    """Model-component arguments of the parallelism (none at the defaults: every model
    component's signature and numbers stay as they were)."""
    kw = {"attention_dp": dp_of(hw)} if dp_of(hw) != 1 else {}
    return {**kw, "moe_ep": moe_ep_of(hw)} if moe_ep_of(hw) else kw


def attention_groups(cfg) -> int:
    """Data-parallel attention groups of a replica: hardware.attention_dp for GQA/MHA models;
    tensor_parallel for an MLA model under mla_mapping=data or attention_dp > 1 (one chip each);
    1 otherwise."""
    hw = cfg.hardware
    if cfg.model.kv_lora_rank > 0 and (dp_of(hw) > 1 or getattr(hw, "mla_mapping", "") == "data"):
        return int(hw.tensor_parallel)
    return dp_of(hw)


def serving_groups(cfg) -> int:
    """Attention groups a serving run splits its requests over (1 for a static run): each runs its
    own scheduler; the simulation runs one of them (components/models/attn_dp.py "In serving")."""
    if _kind(cfg.workload) == "static" or cfg.hardware.tensor_parallel <= 1:
        return 1
    if cfg.get("disagg") is not None and cfg.disagg.get("enabled"):
        return 1  # a pool's steps keep the static share (modes/serving/disagg.py)
    return attention_groups(cfg)


def group_kwargs(cfg) -> dict:
    """Model-component arguments of a serving run under data-parallel attention (none otherwise)."""
    return {"group_tokens": True} if serving_groups(cfg) > 1 else {}


def group_clients(concurrency: int, groups: int) -> int:
    """Closed-loop clients of the simulated (busiest) group: ceil(concurrency / groups)."""
    return -(-int(concurrency) // int(groups))


def dp_token_scale(cfg) -> float:
    """The replica's tokens per token of the simulated group, the factor on the FFN's tokens
    (kernel Hw.DP_TOKENS): concurrency / ceil(concurrency / groups) in a closed loop (fewer clients
    than groups leave groups idle), the groups in an open loop (each takes every groups-th
    request); 1 without data-parallel attention in serving."""
    g = serving_groups(cfg)
    if g <= 1:
        return 1.0
    w = cfg.workload
    if _kind(w) == "closed_loop":
        return float(w.concurrency) / group_clients(w.concurrency, g)
    return float(g)


def collective_link(hw) -> Tuple[float, float]:
    """(GB/s per chip and direction, latency in us of one collective) of the tensor-parallel group's
    collectives: NVLink (link_bw_gb_s, collective_latency_us) within one NVLink domain. A stage of
    N chips beyond hardware.nvlink_domain = L crosses the network between domains: NCCL's rings
    (all-reduce, all-gather, reduce-scatter) run one channel per NIC, so the bytes a ring moves
    across a domain boundary share the L NICs of the domain (scale_out_bw_gb_s each): per chip
    min(link_bw_gb_s, L x scale_out_bw_gb_s) (all-to-all: link_bytes). A small collective runs in
    three phases, NCCL's tree: within each domain (collective_latency_us), between the domains
    (scale_out_latency_us, one chip each) and within each domain again: 2 x collective_latency_us +
    scale_out_latency_us."""
    bw, lat = hw.link_bw_gb_s, hw.collective_latency_us
    domain = int(getattr(hw, "nvlink_domain", 0))
    if domain and hw.tensor_parallel > domain:
        return min(bw, domain * hw.scale_out_bw_gb_s), 2.0 * lat + hw.scale_out_latency_us
    return bw, lat


def link_bytes(op, hw) -> float:
    """An op's link bytes per token, costed at collective_link's bandwidth. An all-to-all over N chips
    beyond one NVLink domain of L sends (L - 1)/(N - 1) of each chip's bytes inside its domain at
    link_bw_gb_s and (N - L)/(N - 1) through its own NIC at scale_out_bw_gb_s, both at once: its
    bytes are scaled so that they take the longer of the two at collective_link's bandwidth."""
    b, domain, n = op.link_bytes_per_token, int(getattr(hw, "nvlink_domain", 0)), hw.tensor_parallel
    if op.coll_kind != "all_to_all" or not b or not domain or n <= domain:
        return b
    inside, out = (domain - 1) / (n - 1) / hw.link_bw_gb_s, (n - domain) / (n - 1) / hw.scale_out_bw_gb_s
    return b * max(inside, out) * collective_link(hw)[0]


def check_network(e: List[str], hw) -> None:
    """Append one line per bad network field (hardware.nvlink_domain, scale_out_*) to `e`."""
    domain = int(getattr(hw, "nvlink_domain", 0))
    bw, lat = getattr(hw, "scale_out_bw_gb_s", 0.0), getattr(hw, "scale_out_latency_us", 0.0)
    if not (domain >= 0 and bw >= 0 and lat >= 0):
        e.append(
            f"hardware.nvlink_domain={domain}, scale_out_bw_gb_s={bw}, scale_out_latency_us={lat} must be >= 0"
        )
    elif domain and hw.tensor_parallel > domain and not bw > 0:
        e.append(
            f"hardware.tensor_parallel={hw.tensor_parallel} spans more than one NVLink domain of {domain} "
            f"chips of {hw.name}: hardware.scale_out_bw_gb_s (the network between domains, per chip) must be > 0"
        )


def microbatches(cfg) -> int:
    """Micro-batches of a pipelined step: workload.pp_microbatches, 0 = one per stage."""
    m = int(getattr(cfg.workload, "pp_microbatches", 0))
    return m if m > 0 else pp_of(cfg.hardware)


def _kind(w) -> str:
    return getattr(w, "kind", "static")


def check(e: List[str], cfg) -> None:
    """Append one line per bad parallelism field to `e` (core.checks.check_config)."""
    hw, w = cfg.hardware, cfg.workload
    pp = pp_of(hw)
    if not pp >= 1:
        e.append(f"hardware.pipeline_parallel={pp} must be >= 1 (1 = no pipeline stages)")
    m = getattr(w, "pp_microbatches", 0)
    if not m >= 0:
        e.append(f"workload.pp_microbatches={m} must be >= 0 (0 = one per pipeline stage)")
    bw = getattr(hw, "pp_link_bw_gb_s", 0.0)
    if not bw >= 0:
        e.append(f"hardware.pp_link_bw_gb_s={bw} must be >= 0 (0 = hardware.link_bw_gb_s)")
    mla = getattr(hw, "mla_mapping", "replicated")
    dp, tp, is_mla = dp_of(hw), hw.tensor_parallel, cfg.model.kv_lora_rank > 0
    if not dp >= 1 or (tp >= 1 and tp % dp):
        e.append(
            f"hardware.attention_dp={dp} must be >= 1 and divide hardware.tensor_parallel={tp} "
            "(attention groups of tensor_parallel / attention_dp chips)"
        )
    elif dp > 1 and is_mla and (dp != tp or mla == "context"):
        e.append(
            f"hardware.attention_dp={dp} for an MLA model ({cfg.model.name}) must be 1 or "
            f"tensor_parallel={tp} (= hardware.mla_mapping=data), not with mla_mapping={mla}"
        )
    elif dp > 1 and cfg.speculative.get("enabled"):
        e.append(f"hardware.attention_dp={dp} is not modelled with speculative decoding (allowed: 1)")
    elif dp > 1 and _kind(w) != "static" and cfg.get("disagg") is not None and cfg.disagg.get("enabled"):
        e.append(
            f"hardware.attention_dp={dp} does not reach disaggregated pools (disagg={cfg.disagg.name}): "
            "each pool takes its own, disagg.prefill.attention_dp / disagg.decode.attention_dp"
        )
    check_experts(e, cfg)
    check_network(e, hw)
    if pp <= 1:
        return
    if hw.execution != "gpu":
        e.append(
            f"hardware.pipeline_parallel={pp} is modelled for hardware.execution=gpu only (allowed "
            f"with {hw.execution}: 1); SN40L deployments shard across sockets by tensor parallelism "
            '(docs/model.md, "Parallelism beyond tensor parallelism")'
        )
    if cfg.get("disagg") is not None and cfg.disagg.get("enabled"):
        e.append(
            f"hardware.pipeline_parallel={pp} is not modelled with disaggregated pools (allowed with "
            f"disagg={cfg.disagg.name}: 1; a pool is tensor_parallel chips)"
        )
    if cfg.speculative.get("enabled") or (cfg.get("coe") is not None and cfg.coe.get("enabled")):
        e.append(
            f"hardware.pipeline_parallel={pp} is not modelled with speculative decoding or "
            "Composition of Experts (allowed there: 1)"
        )
    if not (bw if bw > 0 else hw.link_bw_gb_s) > 0:
        e.append(
            f"hardware.pp_link_bw_gb_s={bw} and hardware.link_bw_gb_s={hw.link_bw_gb_s}: one must be > 0 "
            f"with pipeline_parallel={pp} (the inter-stage link)"
        )


def moe_ep_of(hw) -> int:
    """hardware.moe_ep: the expert-parallel groups of moe_mapping ep / a2a (0: one per chip)."""
    return int(getattr(hw, "moe_ep", 0))


def check_experts(e: List[str], cfg) -> None:
    """Append one line per bad expert placement (hardware.moe_mapping, hardware.moe_ep) to `e`."""
    hw, m = cfg.hardware, cfg.model
    moe, mla, g = getattr(hw, "moe_mapping", "tp"), getattr(hw, "mla_mapping", "replicated"), moe_ep_of(hw)
    dp, tp, is_mla = dp_of(hw), hw.tensor_parallel, m.kv_lora_rank > 0
    if not g >= 0 or (g > 0 and tp >= 1 and tp % g):
        e.append(
            f"hardware.moe_ep={g} must be 0 (every chip its own expert group) or divide "
            f"hardware.tensor_parallel={tp} (experts over moe_ep groups of tensor_parallel / moe_ep chips)"
        )
    elif g > 1 and moe == "tp":
        e.append(f"hardware.moe_ep={g} places experts under moe_mapping=ep or a2a (got moe_mapping=tp)")
    elif moe == "a2a" and g not in (0, tp) and m.n_experts > 0:
        e.append(
            f"hardware.moe_ep={g} with moe_mapping=a2a: an all-to-all of experts split over "
            f"tensor_parallel / moe_ep = {tp // max(g, 1)} chips is not modelled (allowed: 0 or {tp})"
        )
    own = (mla == "data" and is_mla) or dp == tp  # tp = 1: nothing to dispatch
    if moe == "a2a" and m.n_experts > 0 and not own:
        e.append(
            f"hardware.moe_mapping=a2a needs data-parallel attention on every chip (hardware.attention_dp="
            f"tensor_parallel, or mla_mapping=data for MLA; got attention_dp={dp}, mla_mapping={mla} on "
            f"{m.name}): under tensor-parallel attention every chip holds every token and "
            "moe_mapping=ep places the experts without an all-to-all"
        )


def check_feasible(cfg) -> None:
    """Raise Infeasible when the parallelism does not fit the system or the model."""
    hw, m = cfg.hardware, cfg.model
    pp = pp_of(hw)
    if replica_chips(hw) > hw.n_chips:
        raise Infeasible(
            f"tensor_parallel={hw.tensor_parallel} x pipeline_parallel={pp} = {replica_chips(hw)} chips "
            f"exceeds n_chips={hw.n_chips} of {hw.name}"
        )
    if pp > m.n_layers:
        raise Infeasible(
            f"pipeline_parallel={pp} exceeds n_layers={m.n_layers} of {m.name} (a stage needs a layer)"
        )


def pipeline_fields(cfg, act_bytes: float) -> Dict[str, float]:
    """The kernel's pipeline scalars (kernel_layout.Hw, by name); pp = 1: no pipeline. pp stages,
    pp_mb micro-batches, pp_layers decoder layers, pp_first / mid / last the layers of the first,
    busiest middle and last stage, p2p_bytes_tok bytes per token and chip over the stage link of
    p2p_bw bytes/s, p2p_ag_tok bytes per token of the all-gather inside the receiving stage (over
    Hw.LINK_BW), p2p_lat the latency of one boundary (s)."""
    hw, m = cfg.hardware, cfg.model
    pp = pp_of(hw)
    first, mid, last = layer_split(m.n_layers, pp)
    # a stage boundary carries each token's hidden state and residual (2 d_model activations; vLLM
    # IntermediateTensors {hidden_states, residual}); every rank of the tp group sends 1/tp of them
    # and the next stage all-gathers them inside its group (vLLM send_tensor_dict /
    # recv_tensor_dict with all_gather_group = the tp group)
    tp, act = hw.tensor_parallel, 2.0 * m.d_model * act_bytes
    bw = getattr(hw, "pp_link_bw_gb_s", 0.0) or hw.link_bw_gb_s
    lat = getattr(hw, "p2p_latency_us", -1.0)
    lat = lat if lat >= 0 else hw.collective_latency_us
    return {
        "pp": pp,
        "pp_mb": microbatches(cfg),
        "pp_layers": m.n_layers,
        "pp_first": first,
        "pp_mid": mid,
        "pp_last": last,
        "p2p_bytes_tok": act / tp,
        "p2p_ag_tok": (tp - 1) / tp * act,
        "p2p_bw": max(bw, 1e-9) * 1e9,
        "p2p_lat": (lat + (collective_link(hw)[1] if tp > 1 else 0.0)) * 1e-6,
    }


def call_stages(ops, n_calls: int) -> List[float]:
    """Where each kernel call runs under pipeline parallelism: its ops' stage (pre: the first
    stage, post: the last; a call mixing stages or of decoder layers: spread by layers)."""
    seen = [set() for _ in range(n_calls)]
    for op in ops:
        seen[op.call].add(op.stage)
    code = {"pre": Stage.PRE, "post": Stage.POST}
    return [code[next(iter(s))] if len(s) == 1 and next(iter(s)) in code else Stage.LAYER for s in seen]


def stage_loads(cfg, ops, embed_chip: float, tied: bool) -> List[Tuple[float, float]]:
    """(weight bytes, KV bytes per cached token) of one chip of each distinct pipeline stage
    (first, busiest middle, last); one entry without a pipeline. `embed_chip`: the embedding table's
    bytes per chip (the first stage gathers rows from it; tied, the last stage's LM head reads it too)."""
    hw, m = cfg.hardware, cfg.model
    pp = pp_of(hw)
    held = lambda op: (op.resident_bytes if op.resident_bytes >= 0 else op.weight_bytes) * op.repeat  # noqa: E731
    kv = sum(op.kv_write_per_token * op.repeat for op in ops)
    if pp <= 1:  # summed in op order, as before pipeline stages existed (numbers unchanged)
        w_all = sum(held(op) for op in ops)
        return [(w_all if tied else w_all + embed_chip, kv)]
    w = {s: sum(held(op) for op in ops if op.stage == s) for s in ("pre", "layer", "post")}
    n_first, n_mid, n_last = layer_split(m.n_layers, pp)
    L = float(m.n_layers)
    out = [(n_first / L * w["layer"] + w["pre"] + embed_chip, n_first / L * kv)]
    if n_mid:
        out.append((n_mid / L * w["layer"], n_mid / L * kv))
    out.append((n_last / L * w["layer"] + w["post"], n_last / L * kv))
    return out
