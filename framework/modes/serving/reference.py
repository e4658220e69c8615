"""Pure-Python reference of the serving scheduler (framework/modes/serving/scheduler.py), written with
request objects and Python lists instead of the kernel's arrays; step costs come from the
pure-Python step reference (framework/core/reference.py) over the component-level operator list.
Tests require the Numba scheduler to give the same per-request results; `decodelab bench` times
both. Semantics: the module docstring of framework/modes/serving/scheduler.py."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import List

import numpy as np

from decodelab.modes.serving.reference_step import step_seconds
from decodelab.modes.serving.engine_vector import eager_steps
from decodelab.modes.serving.layout import Eng, ORDERS
from decodelab.modes.serving.reference_parts import Req, attended, held, pool_tokens, read_and_pairs
from decodelab.modes.serving.reference_recv import BatchWait, Recv


def engine_dict(eng, buckets) -> dict:
    """The kernel's engine vector (layout.py Eng) as named settings: every field under its name in
    lower case (a float; flags 0 / 1), the queue order by name, spec_tok at least 1, and the batch
    buckets."""
    named = {name.lower(): float(eng[at]) for name, at in Eng}
    spec_tok = named["spec_tok"] if named["spec_tok"] > 0 else 1.0  # <= 0 read as 1 (layout.py)
    order = ORDERS[int(eng[Eng.ORDER])]
    return {**named, "order": order, "spec_tok": spec_tok, "buckets": [float(b) for b in buckets]}


def _arrive(reqs: List[Req], pending, cut: float, enqueue) -> None:
    """Queue every request sent (its time known) that has arrived by `cut` and is not queued yet,
    whatever its index (recv.receive)."""
    for r, a in zip(reqs, pending):
        if math.isnan(r.arrival) and not math.isnan(a) and a <= cut:
            r.arrival = a
            enqueue(r)


def _next_arrival(reqs: List[Req], pending) -> float:
    """The first arrival of the requests sent and not yet queued; inf when none is on its way."""
    return min(
        (a for r, a in zip(reqs, pending) if math.isnan(r.arrival) and not math.isnan(a)), default=math.inf
    )


def _no_call_launch(design):
    """The design with no per-call launch (simulate.step_call_costs, as the reference reads it)."""
    return replace(design, calls=[{**c, "launch_async": 0.0} for c in design.calls])


def reference_serve(
    design, cfg, design_mixed, eng: dict, arrival, prompt, output, think, draft=None
) -> List[Req]:
    """eng: engine_dict(). arrival NaN = issued by a closed-loop client think[k] s after one of
    its requests ends. `draft`: the MTP draft's (design, mixed design, config) when eng's spec_k
    > 0 (reference_step.py). Returns the requests with their times filled in."""
    if cfg.engine.eager_launch_us is not None:  # an eager step's launches are the engine's dispatch
        mixed_eager, decode_eager = eager_steps(cfg)
        design_mixed = _no_call_launch(design_mixed) if mixed_eager else design_mixed
        design = _no_call_launch(design) if decode_eager else design
        if draft is not None:  # the MTP draft's calls likewise
            d, dm, dcfg = draft
            draft = (
                _no_call_launch(d) if decode_eager else d,
                _no_call_launch(dm) if mixed_eager else dm,
                dcfg,
            )
    caps = design.kv_caps
    block = eng["block"]
    spec_q = 1.0 + eng.get("spec_k", 0.0)  # tokens a decoding sequence puts into a step (MTP: k + 1)
    blocks_for = lambda tokens: math.ceil(pool_tokens(tokens, eng) / block)  # noqa: E731
    # the reserve counts full-layer tokens (SGLang's full pool): free pool tokens in those
    full_share = 1.0
    if eng.get("slide", 0.0) > 0:
        full_share = (1 - eng["slide"]) + eng["slide"] * max(eng["slide_mem"], 0.0)
    reqs = [Req(i, float(p), float(o), target=float(p)) for i, (p, o) in enumerate(zip(prompt, output))]
    if eng.get("ready"):  # a disaggregated decode pool: the prompt's KV arrives with the request
        for r in reqs:
            r.prefilled = r.target
    pending = [float(a) for a in arrival]  # arrival times; NaN = not issued yet (closed loop)
    issued = sum(1 for a in pending if not math.isnan(a))
    key = (lambda r: (r.target, r.idx)) if eng["order"] == "sjf" else (lambda r: (r.idx,))
    waiting: List[Req] = []
    running: List[Req] = []
    free = eng["cap_blocks"]
    t, finished, k = 0.0, 0, 0  # k: the steps run
    in_flight = False  # lookahead: the next step is scheduled while this one runs
    last_start = 0.0
    host_end = 0.0  # when the engine loop finished launching the last step (late_send)
    late: List[Req] = []  # the last step's requests
    ratio = eng["admit_ratio"]  # admission reserve (framework/modes/serving/admission.py)
    preemptions = 0
    recv, wait = Recv(eng.get("recv_interval", 1.0), eng.get("adp_release", 1.0)), BatchWait.of(eng)

    def rest(r: Req) -> float:  # output still to come, as the reserve counts it
        return min(max(r.output - r.gen, 0.0), eng["admit_clip"])

    def enqueue(r: Req) -> None:
        waiting.append(r)
        waiting.sort(key=key)

    def preempt_newest() -> Req:
        nonlocal free, preemptions
        preemptions += 1
        v = running.pop()
        free += v.blocks
        v.blocks, v.prefilled, v.target = 0, 0.0, v.prompt + v.gen
        v.preempted += 1
        enqueue(v)
        return v

    while finished < len(reqs):
        cut = last_start if (eng["lookahead"] and in_flight) else t
        if recv.poll() and recv.released(len(running)):  # a polling round the balance releases
            _arrive(reqs, pending, cut, enqueue)
        if not running and not waiting:
            if in_flight:
                in_flight = False
                continue
            ratio = eng["admit_ratio"]  # idle: the ratio starts over
            if (t_next := _next_arrival(reqs, pending)) < math.inf:
                t = t_next
                continue
            raise RuntimeError("stuck: no request running, waiting or yet to arrive")
        budget = eng["max_tokens"]
        step: List[tuple] = []  # (request, tokens it adds, decode?)
        in_step = set()
        before, reserve = preemptions, 0.0

        def decode_part():
            nonlocal budget, free
            j = 0
            while j < len(running) and budget >= spec_q:
                r = running[j]
                if not r.prefilling():
                    if eng["preempt"]:
                        need = blocks_for(held(r.prompt, r.gen + spec_q, caps)) - r.blocks
                        gone = False
                        while need > free:
                            if preempt_newest() is r:
                                gone = True
                                break
                        if gone:
                            break
                        free -= max(need, 0)
                        r.blocks += max(need, 0)
                    step.append((r, spec_q, True))
                    in_step.add(r.idx)
                    budget -= spec_q
                j += 1

        def prefill_part():
            nonlocal budget, free
            j = 0
            while j < len(running) and budget >= 1:
                r = running[j]
                j += 1
                rem = r.target - r.prefilled
                if rem <= 0:
                    continue
                q = min(rem, eng["chunk"] or rem, budget)
                if q < rem and not eng["chunk"]:
                    continue
                if eng["preempt"]:
                    need = blocks_for(r.prefilled + q) - r.blocks
                    while need > free and len(running) > j and running[-1].idx not in in_step:
                        preempt_newest()
                    if need > free:
                        continue
                    free -= need
                    r.blocks += need
                step.append((r, q, False))
                in_step.add(r.idx)
                budget -= q

        def admit_ready():
            nonlocal free
            while waiting and len(running) < eng["max_batch"] and not waiting[0].prefilling():
                r = waiting[0]
                tokens = (
                    held(r.prompt, 1, caps)
                    if eng["preempt"]
                    else max(r.prompt, held(r.prompt, r.output, caps))
                )
                if blocks_for(tokens) > free:
                    break
                free -= blocks_for(tokens)
                r.blocks = blocks_for(tokens)
                running.append(waiting.pop(0))
                r.start = t

        def admit_part():
            nonlocal budget, free, reserve
            while waiting and len(running) < eng["max_batch"] and budget >= 1:
                r = waiting[0]
                if not r.prefilling():  # KV already in the cache: admit_ready's
                    break
                q = min(r.target, eng["chunk"] or r.target, budget)
                if not eng["chunk"] and q < r.target:
                    break
                need = (
                    blocks_for(q)
                    if eng["preempt"]
                    else blocks_for(max(r.prompt, held(r.prompt, r.output, caps)))
                )
                if need > free:
                    break
                if (
                    eng["admit_ratio"] > 0
                    and running
                    and r.target + rest(r) >= free * block / full_share - reserve
                ):
                    break  # the admission reserve holds it back
                reserve += rest(r)
                free -= need
                r.blocks = need
                waiting.pop(0)
                running.append(r)
                if math.isnan(r.start):
                    r.start = t
                step.append((r, q, False))
                in_step.add(r.idx)
                budget -= q

        if eng.get("ready"):
            admit_ready()
        if eng["admit_ratio"] > 0:  # the running sequences' reserve at the start of admission
            reserve = ratio * sum(rest(r) for r in running)
        if eng["mixed"]:
            decode_part()
        prefill_part()
        admit_part()
        if (
            eng["mixed"]
            and not eng["chunk"]
            and step
            and all(dec for _, _, dec in step)
            and waiting
            and len(running) < eng["max_batch"]
            and budget < waiting[0].target <= eng["max_tokens"]
        ):  # whole prompts: the head fits the budget but not next to the decodes
            step.clear()
            in_step.clear()
            budget = eng["max_tokens"]
            admit_part()
            if not step:  # KV memory holds it back: the decode step after all
                budget = eng["max_tokens"]
                decode_part()
        if not eng["mixed"] and not step:
            decode_part()
        step = wait.take(step)  # batch waiting may leave the prompts for a later step
        if eng["admit_ratio"] > 0 and preemptions > before:  # re-estimated after a preemption
            dec, mx = sum(r.gen for r in running), sum(r.output for r in running)
            ratio = min(1.0, (dec + eng["admit_retract"] * len(running)) / (mx + 1.0))
        elif eng["admit_ratio"] > 0 and any(dec for _, _, dec in step):
            ratio = max(ratio - eng["admit_decay"], eng["admit_min"])
        if not step:
            if in_flight:
                in_flight = False
                continue
            ratio = eng["admit_ratio"]
            if not running and (t_next := _next_arrival(reqs, pending)) < math.inf:
                t = max(t, t_next)
                continue
            raise RuntimeError("stuck: a waiting request can never be scheduled")

        dur, launch = step_seconds(
            step, design, design_mixed, cfg, eng, caps, (attended, read_and_pairs), draft
        )
        t_end = t + dur
        if eng.get("late_send"):  # the loop launches this step, then sends the last step's tokens
            host_end = (max(host_end, last_start) if in_flight else t) + launch
            if in_flight and host_end > t:
                _send_late(late, k - 1, pending, think, host_end)

        free, done, issued = _advance(
            step, t_end, k, eng, caps, blocks_for, running, pending, think, free, issued
        )
        finished += done
        last_start, t, in_flight, k = t, t_end, True, k + 1
        late = [r for r, _, _ in step]
        recv.stepped(not all(dec for _, _, dec in step))
    return reqs


def _advance(step, t_end, k, eng, caps, blocks_for, running, pending, think, free, issued):
    """Step k's tokens (ending at t_end): prefill progress, first tokens, finished requests and
    the closed loop's next sends. Returns (free blocks, requests finished, requests issued)."""
    done = 0
    for r, q, dec in step:
        if dec:
            r.gen += eng.get("spec_tok", 1.0)
            if math.isnan(r.first):  # a ready request's first token, on the decode pool
                r.first, r.last, r.first_step = t_end, t_end, k
        else:
            r.prefilled += q
            if r.prefilling():
                continue
            r.gen += 1
            if eng["preempt"]:
                keep = blocks_for(held(r.prompt, r.gen, caps))
                if keep < r.blocks:
                    free += r.blocks - keep
                    r.blocks = keep
            if math.isnan(r.first):
                r.first, r.last, r.first_step = t_end, t_end, k
        r.max_itl = max(r.max_itl, t_end - r.last)
        r.last = t_end
        if r.gen >= r.output:
            r.done_t, r.done_step = t_end, k
            free += r.blocks
            r.blocks = 0
            running.remove(r)
            done += 1
            if eng["closed"] and issued < len(pending):
                # strictly after this boundary's scheduling decision (scheduler.py docstring)
                pending[issued] = math.nextafter(t_end + float(think[issued]), math.inf)
                r.next_req = issued
                issued += 1
    return free, done, issued


def _send_late(late: List[Req], k: int, pending, think, when: float) -> None:
    """The first and last tokens step k emitted reach their clients at `when`
    (scheduler.late_tokens)."""
    for r in late:
        if r.first_step == k and r.first < when:
            r.first = when
        if r.done_step == k and r.done_t < when:
            r.done_t = when
            if r.next_req >= 0:
                pending[r.next_req] = math.nextafter(when + float(think[r.next_req]), math.inf)


def reference_table(reqs: List[Req], delay=None) -> np.ndarray:
    """Per-request (arrival, start, first token, done, preemptions, max ITL) rows; `delay` (the front end's)
    gives the arrival as the client's send, as simulate_serving does."""
    t = np.array([(r.arrival, r.start, r.first, r.done_t, r.preempted, r.max_itl) for r in reqs])
    t[:, 0] -= 0.0 if delay is None else delay
    return t
