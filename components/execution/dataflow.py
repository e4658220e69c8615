"""Dataflow (SN40L RDU) execution.

- fusion=none: every operator is its own kernel call; intermediates go through HBM; each call
  pays a launch and a pipeline fill/drain (SN40L paper, "unfused" baseline of its Fig. 10).
- fusion=layer (default, `auto`): one kernel call per decoder layer; intermediates stay in
  on-chip SRAM, so only the layer's input/output activations touch HBM; the tensor-parallel
  collectives are streamed inside the call (peer-to-peer writes into remote on-chip memory), so
  link time overlaps the weight stream (SN40L paper; Kernel Looping paper).
- orchestration: software = the host issues every call (`launch_us`); hardware (and auto) = the
  chip's graph orchestrator launches calls (`hw_launch_us`) (SN40L paper). Unlike a GPU launch,
  a software launch (program load, argument load, execute) is modelled as not overlapping the
  running call, since loading the next program reconfigures the units that call occupies (our
  reading of the SN40L paper, not a published statement): it is paid in full per call. A GPU
  engine's per-kernel dispatch (`assign_calls`' `engine`, gpu.eager_dispatch_us) does not apply.
- schedule_offloading=M: the runtime stitches M copies of the one-token decode schedule, so the
  chip's orchestrator runs M decode steps per host round trip: `host_step_us` is paid once per M
  steps. With speculative decoding M is capped by the speculation window (k + 1 steps), since
  the host decides acceptance after every verification (Dataflow paper).
- kernel_looping: the N consecutive calls of the decoder-layer kernel become one call with a
  pipelined loop over layers, so launch and fill/drain are paid once per step instead of once
  per layer (Kernel Looping paper).
- batch barrier: a fused decoder layer holds the next layer until every sample of the batch has
  left it; the samples leave `sample_interval_us` apart, so each layer invocation idles
  (B - 1) * sample_interval_us (counted as fill_drain). Without Kernel Looping the call
  boundary is such a barrier; with it, the layer loop still is (Dataflow paper).
- batch_streaming (needs kernel_looping): a loop buffer of `loop_buffer_slots` slots lets a
  sample enter layer n+1 as soon as it leaves layer n, so only samples beyond the slots wait:
  max(0, B - slots) * sample_interval_us per layer. No gain at batch 1; the gain grows with B up
  to the slot count and shrinks relative to the layer's weight stream for larger models
  (Dataflow paper: sweet spot at batch 8, smaller gain for 8B than for 1B/3B).
- repeated identical calls (software orchestration, fused layer kernel not looped): the first
  call pays `launch_us`; each repeat of the same program pays `repeat_launch_us` (SN40L paper
  Sec. VI-C: repeated identical layers see virtually zero kernel-launch overhead, i.e. the
  program is not reloaded). Unset (< 0) = `launch_us`: every call pays the full launch.
- MoE routing (fused): the top-k decision (an op with `route_point`) chooses the expert weights
  the rest of the layer streams, so they cannot be prefetched across it: a fused MoE layer is
  two programs split at the decision, and the boundary costs a launch and `route_fill_us` of
  pipeline drain/refill per MoE layer invocation, also inside a looped layer kernel (Kernel
  Looping removes the boundaries between consecutive calls of one kernel, not a data
  dependency inside it). The on-chip orchestrator takes the decision without the host
  (Dataflow paper: ScheduleOffloading works with MoE routing where CUDA graphs do not).
"""

from __future__ import annotations

from typing import List, Tuple

from decodelab.components.ops import Op

APPLIES = {"fusion", "orchestration", "kernel_looping", "schedule_offloading", "batch_streaming"}


def host_round_trip(opt, cap=None):
    """Decode steps per host round trip (ScheduleOffloading's M, capped by speculation)."""
    m = max(1, opt.schedule_offloading)
    notes = []
    if cap is not None and m > cap:
        notes.append(f"schedule_offloading={m} capped at the speculation window k+1={cap}")
        m = cap
    return m, notes


def assign_calls(ops: List[Op], hw, opt, engine=None) -> Tuple[List[Op], List[dict], List[str]]:
    notes = []
    # The default profile is each stack's production default: its cuda_graphs=true is what GPU
    # engines do, not a request to a dataflow chip, so only another profile's flag is noted.
    if opt.cuda_graphs and getattr(opt, "name", "") != "default":
        notes.append("cuda_graphs does not apply to dataflow execution; ignored")
    fused = opt.fusion in ("auto", "layer")
    if opt.kernel_looping and not fused:
        notes.append("kernel_looping needs fusion=layer (it loops the fused layer kernel); ignored")
    streaming = opt.batch_streaming and opt.kernel_looping and fused
    if opt.batch_streaming and not streaming:
        notes.append(
            "batch_streaming needs kernel_looping with fusion=layer (the loop buffer "
            "sits in the looped layer kernel); ignored"
        )
    gap = hw.sample_interval_us * 1e-6
    hardware = opt.orchestration in ("auto", "hardware")
    launch = (hw.hw_launch_us if hardware else hw.launch_us) * 1e-6
    fill = hw.fill_drain_us * 1e-6
    calls: List[dict] = []

    rep_us = getattr(hw, "repeat_launch_us", -1.0)
    again = launch if hardware or rep_us < 0 else rep_us * 1e-6  # a repeat of a loaded program

    def new_call(repeat, looped=False, barrier=False, fill_us=fill, reuse=False):
        free = float(max(1, hw.loop_buffer_slots)) if streaming else 1.0
        each = again if reuse and repeat > 1 else launch
        calls.append(
            {
                "repeat": repeat,
                "sample_gap": gap if barrier else 0.0,
                "free_samples": free,
                "launch_each": 0.0 if looped else each + hw.sync_us * 1e-6,
                "launch_async": 0.0,
                "fill_each": 0.0 if looped else fill_us,
                "launch_once": launch if looped else (launch - each if reuse and repeat > 1 else 0.0),
                "fill_once": fill if looped else 0.0,
                "overlap_link": fused,
                "looped": looped,
            }
        )
        return len(calls) - 1

    if not fused:
        for op in ops:
            op.call = new_call(op.repeat)  # per-operator fill/drain already covers the barrier
        return ops, calls, notes

    # one fused call per stage and repeat count: layers of different kinds (e.g. dense and MoE
    # layers emitted as separate op groups) are different programs, each its own call
    by_stage = {}
    for op in ops:
        if op.route_point:  # the boundary a routing decision puts inside every MoE layer
            op.call = new_call(op.repeat, fill_us=hw.route_fill_us * 1e-6)
            continue
        key = (op.stage, op.repeat)
        if key not in by_stage:
            looped = op.stage == "layer" and opt.kernel_looping
            layer = op.stage == "layer"
            by_stage[key] = new_call(op.repeat, looped, barrier=layer, reuse=layer)
        op.call = by_stage[key]
    # Inside a fused layer the intermediates live in SRAM: only the layer input (residual stream)
    # is read and its output written through memory, once per layer.
    seen = set()  # the first op of a call (input norm) keeps it
    for op in ops:
        if op.stage == "layer":
            if op.call in seen:
                op.act_bytes_per_token = 0.0
            op.act_bytes_per_ctx = 0.0  # e.g. MLA's decompressed keys/values: streamed
            seen.add(op.call)
    return ops, calls, notes
