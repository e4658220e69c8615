"""Serving runs (workload.kind closed_loop | open_loop): requests -> the Numba scheduler
(framework/modes/serving/scheduler.py) -> per-request and aggregate metrics (metrics.py).

`evaluate_serving(cfg, design)` is what `evaluate(cfg)` returns for a serving workload: the same
result shape (status, reason, metrics as flat floats, notes) plus `serving`, the per-request and
per-step arrays that framework/output/serving.py writes and plots. Equations: docs/model.md,
"Serving: continuous batching" and "TTFT under continuous batching".
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from decodelab.components.models import linear_attn
from decodelab.components.placement import GIB
from decodelab.core.kv_costs import ReadModel, state_pool_kind
from decodelab.core import parallel
from decodelab.modes.resolve import with_fields
from decodelab.modes.serving import frontend, mtp, recv as RV, scheduler as SK
from decodelab.core.build import Design, build
from decodelab.core.result import Result
from decodelab.modes.serving.engine_check import check_engine
from decodelab.modes.serving.metrics import kv_bytes_per_token_chip, serving_metrics
from decodelab.modes.serving.workload import group_requests, group_workload, simulated_warmup
from decodelab.errors import ConfigError, Infeasible
from decodelab.kernel_layout import Call, Cap, Hw
from decodelab.modes.serving.layout import Eng, ORDERS


def mixed_design(cfg, design: Design) -> Tuple[Design, list]:
    """The design steps with prefill work run on: CUDA graphs replay decode-only steps, so with
    `engine.graphs_decode_only` a GPU's mixed and prefill steps launch every kernel eagerly."""
    if not (
        cfg.engine.graphs_decode_only and cfg.hardware.execution == "gpu" and cfg.optimizations.cuda_graphs
    ):
        return design, []
    return build(with_fields(cfg, {"optimizations.cuda_graphs": False})), [
        "steps with prefill work launch kernels eagerly (CUDA graphs replay "
        "decode-only steps: engine.graphs_decode_only)"
    ]


def eager_steps(cfg) -> Tuple[bool, bool]:
    """(steps with prefill work, decode-only steps): which of a GPU design's steps replay no CUDA
    graph, so that the engine's host dispatches every kernel of them (engine.eager_launch_us)."""
    if cfg.hardware.execution != "gpu":
        return False, False
    graphs = bool(cfg.optimizations.cuda_graphs)
    return (not graphs) or bool(cfg.engine.graphs_decode_only), not graphs


def step_call_costs(cfg, design: Design, mixed: Design) -> Tuple[np.ndarray, np.ndarray]:
    """The call costs decode-only and mixed steps run with (SK.serve's call_cost and
    call_cost_mixed). With the engine's eager dispatch modelled per step (engine.eager_launch_us)
    an eager step's per-call launch (hardware.launch_us) is part of that host work, not a
    per-kernel exposure: its column is zero there (the reference does the same)."""
    mixed_eager, decode_eager = eager_steps(cfg)

    def costs(d: Design, eager: bool) -> np.ndarray:
        if cfg.engine.eager_launch_us is None or not eager:
            return d.call_cost
        cc = d.call_cost.copy()
        cc[:, Call.LAUNCH_ASYNC] = 0.0
        return cc

    return costs(design, decode_eager), costs(mixed, mixed_eager)


def stepcost_arrays(cfg, design: Design, mixed: Design) -> tuple:
    """A design's arrays as the scheduler's step cost takes them (stepcost.py): operators, call
    costs of graphed and eager steps (step_call_costs), KV tiers, the serving machine vector."""
    cc = step_call_costs(cfg, design, mixed)
    return (
        design.op_call,
        design.op_w,
        design.op_lin,
        design.call_rep,
        *cc,
        design.kv_frac,
        serving_hw(design, cfg),
    )


def design_args(cfg, design: Design, mixed: Design, draft: Optional[tuple] = None) -> tuple:
    """SK.serve's arguments that come from the designs (the engine vector and the requests
    follow): operator arrays, the step call costs, tiers, the serving machine vector, KV caps and
    the MTP draft's arrays (draft_args; without one the target's, which the scheduler leaves
    unused)."""
    if draft is None and mtp.draft_k(cfg) > 0:  # prepare() and disagg_pools.pool_design build it
        raise ConfigError("engine.mtp.k > 0 needs the MTP draft's arrays (simulate.draft_args)")
    a = stepcost_arrays(cfg, design, mixed)
    return (*a[:6], design.tier_bw, *a[6:], design.kv_caps, a if draft is None else draft)


def draft_args(cfg, draft: Design) -> tuple:
    """The MTP draft design's arrays for the scheduler (stepcost_arrays of its config)."""
    dcfg = mtp.draft_cfg(cfg)
    return stepcost_arrays(dcfg, draft, mixed_design(dcfg, draft)[0])


def serving_designs(cfg, design: Optional[Design] = None) -> Tuple[Design, Design, Optional[tuple]]:
    """(target, its mixed-step design, MTP draft arrays or None) of a serving run: with in-engine
    MTP (mtp.draft_k > 0) the target is built beside the MTP module (mtp.designs), else `design`
    (built here when None)."""
    draft = None
    if mtp.draft_k(cfg) > 0:
        design, d = mtp.designs(cfg)
        draft = draft_args(cfg, d)
    elif design is None:
        design = build(cfg)
    return design, mixed_design(cfg, design)[0], draft


def max_held(prompt: np.ndarray, output: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """scheduler.max_held_tokens over arrays of requests (numpy, one call)."""
    kept = np.minimum(prompt, caps[Cap.PROMPT_CAP]) if caps[Cap.PROMPT_CAP] > 0 else prompt
    n = kept + output - 1.0
    if caps[Cap.TOTAL_CAP] > 0:
        n = np.minimum(n, caps[Cap.TOTAL_CAP])
    return np.maximum(prompt, n)


def sliding_fields(design: Design, e) -> Dict[str, float]:
    """The sliding-window layers' share, window and pool rule (engine.swa_kv) of the engine vector
    (layout.py Eng.SLIDE, WINDOW, SLIDE_MEM; all 0: every layer a full-attention one); state layers
    stay costed as full-attention ones. Sparse attention (components/models/dsa.py, csa.py, msa.py) has fields of
    its own (Eng.SPARSE, TOPK): its share read for the top-k, held whole."""
    rm = getattr(design, "kv_read_model", None)
    sparse = {"sparse": 0.0, "topk": 0.0}
    if rm is not None and rm[ReadModel.SPARSE] > 0:
        sparse = {"sparse": rm[ReadModel.SPARSE], "topk": rm[ReadModel.TOPK]}
    if rm is None or rm[ReadModel.SLIDE] <= 0 or rm[ReadModel.WINDOW] <= 0:
        return {"slide": 0.0, "window": 0.0, "slide_mem": 0.0, **sparse}
    mem = {"window": -1.0, "full": 1.0}.get(e.swa_kv, e.swa_full_tokens_ratio)
    return {"slide": rm[ReadModel.SLIDE], "window": rm[ReadModel.WINDOW], "slide_mem": mem, **sparse}


def kv_paging(cfg, design: Design, per_tok: float) -> Dict[str, float]:
    """The pool's block (Eng.BLOCK, tokens) and a held sequence's linear-layer states in pool token-equivalents
    (Eng.STATE_TOKENS). Under engine.state_in_kv_pool, vLLM's hybrid KV cache manager
    (platforms/interface.py _align_hybrid_block_size, without prefix caching): one page per layer and block,
    its attention block grown to a multiple of kv_block_tokens a holds a linear layer's state,
    B = a ceil(state page / (a x a layer's KV per token)); layers grouped g = min(attending, linear) a
    group, a request holds ceil(linear / g) state blocks of g pages beside its attention blocks; states
    without linear layers (DeepSeek-V4's compressor states) take their bytes in the pool. Else the engine
    file's block and no states in the pool."""
    e = cfg.engine
    state = float(design.memory.get("state_bytes_per_seq", 0.0))
    n_lin, n_att = linear_attn.n_linear(cfg.model), linear_attn.n_attending(cfg.model)
    if not e.state_in_kv_pool or state <= 0.0 or n_att == 0 or per_tok <= 0.0:
        return {"block": float(e.kv_block_tokens), "state_tokens": 0.0}
    if n_lin == 0:  # states beside attention layers (DeepSeek-V4's compressors): pages of their own
        return {"block": float(e.kv_block_tokens), "state_tokens": state / per_tok}
    a, page, kv_layer = e.kv_block_tokens, state / n_lin, per_tok / n_att
    block = a * math.ceil(page / (a * kv_layer))
    g = min(n_att, n_lin)
    return {"block": float(block), "state_tokens": math.ceil(n_lin / g) * block * g / n_att}


def eager_fields(cfg, design: Design) -> Dict[str, float]:
    """The engine's dispatch of an eager step (engine.eager_launch_us; Eng.EAGER_HOST, EAGER_DECODE):
    the host time of a step with prefill work when it replays no graph (its kernel calls: call_rep,
    per-layer calls x layers), and whether decode-only steps are eager too."""
    e = cfg.engine
    if e.eager_launch_us is None:
        return {"eager_host": 0.0, "eager_decode": 0.0}
    mixed_eager, decode_eager = eager_steps(cfg)
    host = e.eager_launch_us * 1e-6 * float(np.sum(design.call_rep)) if mixed_eager else 0.0
    return {"eager_host": host, "eager_decode": 1.0 if decode_eager else 0.0}


def admission_fields(e, admit: float) -> Dict[str, float]:
    """The admission reserve's fields of the engine vector (engine.admit_*, x `admit`: the share
    under data-parallel attention, engine.dp_attention.admit_scale)."""
    return {
        "admit_ratio": admit * e.admit_ratio,
        "admit_min": admit * e.admit_ratio_min,
        "admit_decay": admit * (e.admit_ratio - e.admit_ratio_min) / e.admit_ratio_decay_steps,
        "admit_clip": e.admit_clip_tokens,
        "admit_retract": e.admit_retract_steps,
    }


def step_limits(cfg) -> Tuple[Dict[str, float], np.ndarray, list]:
    """The engine vector's step limits and admission reserve (Eng.MAX_BATCH, MAX_TOKENS, CHUNK,
    GRAPH_MAX, ADMIT_*), the batch bucket list and notes. Under data-parallel attention they are
    one attention group's own scheduler's (engine.dp_attention)."""
    e = cfg.engine
    notes = []
    budget, chunk, admit = e.max_tokens_per_step, e.chunk_size, 1.0
    groups = parallel.serving_groups(cfg)
    if groups > 1:
        admit = e.dp_attention.admit_scale
        if e.dp_attention.split_budget:
            budget, chunk = max(1, budget // groups), (max(1, chunk // groups) if chunk else 0)
            notes.append(
                f"data-parallel attention: each group's step budget {budget} and prefill chunk "
                f"{chunk} tokens (engine.dp_attention.split_budget: the file's // {groups})"
            )
    buckets = np.array(sorted(set(int(b) for b in e.batch_buckets)), dtype=np.float64)
    max_batch = e.max_batch
    if len(buckets) and max_batch > buckets[-1] and e.graph_overflow == "cap":
        max_batch = int(buckets[-1])
        notes.append(f"engine.max_batch capped at the largest batch bucket ({max_batch})")
    limits = {
        "max_batch": max_batch,
        "max_tokens": budget,
        "chunk": chunk,
        "graph_max": buckets[-1] if len(buckets) and e.graph_overflow == "eager" else 0.0,
        **admission_fields(e, admit),
    }
    return limits, buckets, notes


def states_held(design: Design, e) -> str:
    """'' or what the linear layers' states held outside the KV pool took from it (check_requests)."""
    state = float(design.memory.get("state_bytes_per_seq", 0.0))
    kind = state_pool_kind(state, e)
    if kind == "none":
        return ""
    if kind == "ratio":
        return f"after the state pool (engine.state_pool_ratio={e.state_pool_ratio}) "
    return (
        f"after {int(e.max_batch)} sequences' states of {state / GIB:.3f} GiB each "
        "(engine.max_batch: one state per sequence the engine may run) "
    )


def check_requests(cfg, design: Design, eng: np.ndarray, prompt, output, ready: bool) -> None:
    """Infeasible for requests the engine could never schedule: longer than the model's context, a
    prompt prefilled whole beyond the step budget, or more KV than the pool holds."""
    e = cfg.engine
    longest = int(np.argmax(prompt + output))
    if prompt[longest] + output[longest] > cfg.model.max_context:
        raise Infeasible(
            f"a request of {prompt[longest]:.0f} + {output[longest]:.0f} tokens "
            f"exceeds max_context={cfg.model.max_context} of {cfg.model.name}"
        )
    budget = eng[Eng.MAX_TOKENS]
    if not ready and eng[Eng.CHUNK] == 0 and prompt.max() > budget:
        raise Infeasible(
            f"a prompt of {prompt.max():.0f} tokens exceeds engine."
            f"max_tokens_per_step={budget:.0f} with whole-prompt prefill "
            "(engine.chunk_size=0)"
        )
    # queue: the reservation at admission; preempt: a recompute of prompt + o - 1 generated
    # tokens (a request is done at o), which is at least what its cache ever holds
    held = max_held(prompt, output, design.kv_caps) if e.on_kv_full == "queue" else prompt + output - 1.0
    need = max(float(SK.kv_blocks(n, eng)) for n in np.unique(held))
    cap_blocks, block, per_tok = eng[Eng.CAP_BLOCKS], eng[Eng.BLOCK], kv_bytes_per_token_chip(design)
    if need > cap_blocks:
        raise Infeasible(
            f"a request needs {need * block * per_tok / GIB:.2f} GiB of KV per chip; "
            f"the KV pool holds {cap_blocks * block * per_tok / GIB:.2f} GiB "
            + states_held(design, e)
            + (
                f"(engine.kv_mem_fraction={e.kv_mem_fraction} of the HBM left after weights"
                + (" and the start-up profile's activations)" if e.profile_reserve else ")")
                if e.kv_mem_basis == "free"
                else f'(engine.kv_mem_basis={e.kv_mem_basis}: docs/model.md, "Serving: continuous batching")'
            )
        )


def engine_inputs(
    cfg, design: Design, prompt, output, ready: bool = False
) -> Tuple[np.ndarray, np.ndarray, list]:
    """The engine vector (layout.py Eng, every field by name) and bucket list for the kernel;
    raises Infeasible for requests that could never be scheduled. ready: the requests arrive with
    their prompt's KV (Eng.READY, a disaggregated decode pool), so no prompt is prefilled whole."""
    e, w = cfg.engine, cfg.workload
    check_engine(e)
    limits, buckets, notes = step_limits(cfg)
    per_tok = kv_bytes_per_token_chip(design)
    paging = kv_paging(cfg, design, per_tok)
    spec_k, spec_tok = mtp.engine_slots(cfg)
    eng = Eng.vector(
        {
            **limits,
            **sliding_fields(design, e),
            **eager_fields(cfg, design),
            "order": ORDERS.index(e.order),
            "mixed": 1.0 if e.mixed_steps else 0.0,
            "preempt": 1.0 if e.on_kv_full == "preempt" else 0.0,
            "cap_blocks": np.floor(design.memory["kv_pool_bytes"] / max(per_tok, 1e-30) / paging["block"]),
            **paging,
            "closed": 1.0 if w.kind == "closed_loop" else 0.0,
            "overlap": 1.0 if e.overlap else 0.0,
            # the engine loop's host work replaces the hardware's per-step host cost (serving_hw)
            "host_iter": design.hw[Hw.HOST_STEP] if e.host_iter_us is None else e.host_iter_us * 1e-6,
            "host_req": e.host_per_req_us * 1e-6,
            "lookahead": 1.0 if (e.overlap and e.lookahead) else 0.0,
            "late_send": 1.0 if (e.overlap and e.lookahead) else 0.0,
            "spec_k": spec_k,
            "spec_tok": spec_tok,
            "ready": 1.0 if ready else 0.0,
            # a disaggregated decode pool's requests come from its prefill pool: every round
            "recv_interval": 1.0 if ready else float(e.recv_interval),
            # one-pool serving sets it (prepare: adp_release); a disaggregated pool keeps 1: its
            # prefill ranks decode nothing to wait for, its decode ranks get no prompts
            "adp_release": 1.0,
            **batch_wait_fields(cfg, limits["max_tokens"], ready),
        }
    )
    check_requests(cfg, design, eng, prompt, output, ready)
    return eng, buckets, notes


def batch_wait_fields(cfg, budget: float, ready: bool) -> Dict[str, float]:
    """Eng.WAIT_ITERS and WAIT_TOKENS (recv.py batch_held): engine.batch_wait_timeout_iters and
    batch_wait_max_tokens_ratio x the step budget; off under data-parallel attention (TensorRT-LLM's
    _schedule waits only without it) and in a disaggregated decode pool (no prompts to hold)."""
    e = cfg.engine
    if ready or parallel.serving_groups(cfg) > 1:
        return {"wait_iters": 0.0, "wait_tokens": 0.0}
    return {
        "wait_iters": float(e.batch_wait_timeout_iters),
        "wait_tokens": float(e.batch_wait_max_tokens_ratio) * float(budget),
    }


def serving_hw(design: Design, cfg=None) -> np.ndarray:
    """The machine vector the scheduler runs with: the per-step host cost is the engine's
    (Eng.HOST_ITER, Eng.HOST_REQ, overlap), so the kernel's own host term is zero; under data-parallel
    attention the FFN's tokens are every group's (Hw.DP_TOKENS, core/parallel.py dp_token_scale)."""
    hw = design.hw.copy()
    hw[Hw.HOST_STEP] = 0.0
    if cfg is not None:
        hw[Hw.DP_TOKENS] = parallel.dp_token_scale(cfg)
    return hw


def adp_release(cfg, groups: int, output: np.ndarray, spec_tok: float) -> float:
    """Eng.ADP_RELEASE of one of `groups` attention-DP groups: recv.balance_rounds under
    engine.dp_attention.balance (a closed loop's clients per group), else 1 (every round)."""
    dpa, w = cfg.engine.dp_attention, cfg.workload
    if not dpa.balance or groups <= 1:
        return 1.0
    clients = float(group_workload(w, groups).concurrency) if w.kind == "closed_loop" else 0.0
    mean_out = float(np.nanmean(output)) if len(output) else 0.0
    return RV.balance_rounds(
        groups, dpa.balance_timeout_iters, dpa.balance_wait_iters, clients, mean_out, max(spec_tok, 1.0)
    )


def group_notes(cfg, groups: int, eng: np.ndarray) -> list:
    """What a run under data-parallel attention simulates (notes of the result)."""
    notes = []
    if groups > 1:
        notes.append(
            f"data-parallel attention: one of {groups} attention groups simulated (its own scheduler, "
            f"KV pool and share of the requests), the FFN on {parallel.dp_token_scale(cfg):g}x its "
            "tokens (every group's, balanced); requests, steps, batch and KV are the group's, "
            "throughput the replica's"
        )
    if eng[Eng.ADP_RELEASE] > 1.0:
        notes.append(
            f"attention-DP balance (engine.dp_attention.balance): new prompts are read every "
            f"{eng[Eng.ADP_RELEASE]:.1f} steps or by an idle group (modes/serving/recv.py)"
        )
    return notes


def prepare(cfg, design: Design, mixed: Design = None, draft: Optional[tuple] = None) -> Dict[str, Any]:
    """Everything the scheduler kernel takes: `kernel_args` for SK.serve, and the pieces. `draft`:
    the MTP draft's arrays (draft_args), built here when the run has MTP and none is given."""
    if cfg.speculative.enabled:
        raise ConfigError(
            f"speculative.enabled=true with workload.kind={cfg.workload.kind!r}: "
            "speculative serving is not modelled; use workload.kind=static"
        )
    groups = parallel.serving_groups(cfg)  # data-parallel attention: one group is simulated
    arrival, prompt, output = group_requests(cfg.workload, cfg.model.max_context, groups)
    think = np.full(len(prompt), cfg.workload.think_ms * 1e-3)  # closed loop: per request
    delay = frontend.delays(cfg.engine, cfg.workload, prompt, arrival)  # send -> scheduler (engine.frontend)
    arrival, think = frontend.to_scheduler(arrival, think, delay)
    if mixed is None:
        mixed, notes = mixed_design(cfg, design)
    else:  # the caller built it (decodelab validate: once per design, many workloads)
        notes = []
    if cfg.kv_policy.name != "full":
        notes.append(
            f"serving applies kv_policy={cfg.kv_policy.name} through its caps (kept, "
            "held and read tokens); its selection cost at prefill and read-model extras "
            "(framework/core/kv_costs.py) are in static runs only"
        )
    rm = getattr(design, "kv_read_model", None)
    if rm is not None and rm[ReadModel.STATE] > 0:
        notes.append(
            "serving treats state layers as full-attention layers (KV read and held grow with "
            "the whole context); their constant state (framework/core/kv_costs.py) is in static "
            "runs only"
        )
    eng, buckets, more = engine_inputs(cfg, design, prompt, output)
    eng[Eng.ADP_RELEASE] = adp_release(cfg, groups, output, eng[Eng.SPEC_TOK])
    more += group_notes(cfg, groups, eng)
    if draft is None and eng[Eng.SPEC_K] > 0:
        draft = draft_args(cfg, build(mtp.draft_cfg(cfg)))
    args = (
        *design_args(cfg, design, mixed, draft),
        eng,
        buckets,
        arrival,
        prompt,
        output,
        think,
    )
    return {
        "kernel_args": args,
        "mixed": mixed,
        "eng": eng,
        "buckets": buckets,
        "arrival": arrival,
        "prompt": prompt,
        "output": output,
        "think": think,
        "delay": delay,
        "draft": draft,
        "notes": notes + more,
    }


def simulate_serving(cfg, design: Design, mixed: Design = None, draft: Optional[tuple] = None):
    """Run the scheduler. Returns (req, steps, design_mixed, eng, notes)."""
    p = prepare(cfg, design, mixed, draft)
    mixed, eng, notes = p["mixed"], p["eng"], p["notes"]
    req, steps, status = SK.serve(*p["kernel_args"])
    if status != 0:
        raise Infeasible(
            "the scheduler could not place every request (KV pool or token budget "
            "too small for a waiting request)"
        )
    return frontend.to_client(req, p["delay"]), steps, mixed, eng, notes


def evaluate_serving(
    cfg, design: Design, keep_steps: bool = True, mixed: Design = None, draft: Optional[tuple] = None
) -> Result:
    if draft is None and mtp.draft_k(cfg) > 0:  # the target beside the MTP module (serving_designs)
        design, mixed, draft = serving_designs(cfg)
    req, steps, _, _, notes = simulate_serving(cfg, design, mixed, draft)
    warm = simulated_warmup(group_workload(cfg.workload, parallel.serving_groups(cfg)))
    if warm:  # the benchmark client excludes its warm-up requests from the statistics
        req = req[warm:]
        notes.append(f"{warm} warm-up requests simulated ahead, excluded from the metrics")
    return Result(
        "ok",
        notes=list(design.notes) + notes,
        metrics=serving_metrics(cfg, design, req, steps),
        serving={
            "requests": req,
            "steps": steps if keep_steps else None,
            "kv_bytes_per_token_chip": kv_bytes_per_token_chip(design),
        },
    )
