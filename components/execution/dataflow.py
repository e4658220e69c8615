"""Dataflow (SN40L RDU) execution.

- fusion=none: every operator is its own kernel call; intermediates go through HBM; each call
  pays a launch and a pipeline fill/drain (SN40L paper, "unfused" baseline of its Fig. 10).
- fusion=layer (default, `auto`): one kernel call per decoder layer; intermediates stay in
  on-chip SRAM, so only the layer's input/output activations touch HBM; the tensor-parallel
  collectives are streamed inside the call (peer-to-peer writes into remote on-chip memory), so
  link time overlaps the weight stream (SN40L paper; Kernel Looping paper).
- orchestration: software = the host issues every call (`launch_us`); hardware (and auto) = the
  chip's graph orchestrator launches calls (`hw_launch_us`) (SN40L paper).
- schedule_offloading=M: the runtime stitches M copies of the one-token decode schedule, so the
  chip's orchestrator runs M decode steps per host round trip: `host_step_us` is paid once per M
  steps. With speculative decoding M is capped by the speculation window (k + 1 steps), since
  the host decides acceptance after every verification (Dataflow paper).
- kernel_looping: the N consecutive calls of the decoder-layer kernel become one call with a
  pipelined loop over layers, so launch and fill/drain are paid once per step instead of once
  per layer (Kernel Looping paper).
"""
from __future__ import annotations

from typing import List, Tuple

from components.ops import Op

APPLIES = {"fusion", "orchestration", "kernel_looping", "schedule_offloading"}


def host_round_trip(opt, cap=None):
    """Decode steps per host round trip (ScheduleOffloading's M, capped by speculation)."""
    m = max(1, opt.schedule_offloading)
    notes = []
    if cap is not None and m > cap:
        notes.append(f"schedule_offloading={m} capped at the speculation window k+1={cap}")
        m = cap
    return m, notes


def assign_calls(ops: List[Op], hw, opt) -> Tuple[List[Op], List[dict], List[str]]:
    notes = []
    if opt.cuda_graphs:
        notes.append("cuda_graphs does not apply to dataflow execution; ignored")
    fused = opt.fusion in ("auto", "layer")
    if opt.kernel_looping and not fused:
        notes.append("kernel_looping needs fusion=layer (it loops the fused layer kernel); ignored")
    hardware = opt.orchestration in ("auto", "hardware")
    launch = (hw.hw_launch_us if hardware else hw.launch_us) * 1e-6
    fill = hw.fill_drain_us * 1e-6
    calls: List[dict] = []

    def new_call(repeat, looped=False):
        calls.append({"repeat": repeat,
                      "launch_each": 0.0 if looped else launch,
                      "fill_each": 0.0 if looped else fill,
                      "launch_once": launch if looped else 0.0,
                      "fill_once": fill if looped else 0.0,
                      "overlap_link": fused})
        return len(calls) - 1

    if not fused:
        for op in ops:
            op.call = new_call(op.repeat)
        return ops, calls, notes

    by_stage = {}
    for op in ops:
        if op.stage not in by_stage:
            looped = op.stage == "layer" and opt.kernel_looping
            by_stage[op.stage] = new_call(op.repeat, looped)
        op.call = by_stage[op.stage]
    # Inside a fused layer the intermediates live in SRAM: only the layer input (residual stream)
    # is read and its output written through memory, once per layer.
    layer_ops = [op for op in ops if op.stage == "layer"]
    if layer_ops:
        d_io = layer_ops[0].act_bytes_per_token   # input norm reads d and writes d
        for op in layer_ops:
            op.act_bytes_per_token = 0.0
        layer_ops[0].act_bytes_per_token = d_io
    return ops, calls, notes
