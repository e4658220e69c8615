"""Serving runs (workload.kind closed_loop | open_loop): requests -> the Numba scheduler
(framework/modes/serving/scheduler.py) -> per-request and aggregate metrics (metrics.py).

`evaluate_serving(cfg, design)` is what `evaluate(cfg)` returns for a serving workload: the same
result shape (status, reason, metrics as flat floats, notes) plus `serving`, the per-request and
per-step arrays that framework/output/serving.py writes and plots. Equations: docs/model.md,
"Serving: continuous batching" and "TTFT under continuous batching".
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from decodelab.core.kv_costs import ReadModel
from decodelab.core import parallel
from decodelab.modes.resolve import with_fields
from decodelab.modes.serving import frontend, mtp, recv as RV, scheduler as SK
from decodelab.core.build import Design, build
from decodelab.core.result import Result
from decodelab.modes.serving.engine_vector import eager_steps, engine_inputs
from decodelab.modes.serving.metrics import kv_bytes_per_token_chip, serving_metrics
from decodelab.modes.serving.workload import group_requests, group_workload, simulated_warmup
from decodelab.errors import ConfigError, Infeasible
from decodelab.kernel_layout import Call, Hw
from decodelab.modes.serving.layout import Eng


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
