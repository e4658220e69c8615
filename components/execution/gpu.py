"""GPU execution: every operator is its own kernel (TensorRT-LLM issues ~10 per decoder layer).

Each kernel call pays `launch_us` (host-side launch; removed by CUDA graphs) and `sync_us`
(the kernel-boundary drain/synchronisation that CUDA graphs cannot remove). Launches are
asynchronous: the host enqueues the next kernel while the current one runs, so a launch is
exposed only where it exceeds the kernel's run time (max(0, launch_us - kernel time)); the
sync is paid at every boundary. Collectives are
separate kernels whose time adds to the step (not overlapped). Sources: Kernel Looping paper
(~320 kernel launches per token for Llama-3.1-8B, a few microseconds each);
shared/reference/hardware.md.
"""

from __future__ import annotations

from typing import List, Tuple

from decodelab.components.ops import Op

APPLIES = {"cuda_graphs"}


def host_round_trip(opt, cap=None):
    """Decode steps per host round trip: always 1 on a GPU (a CUDA graph replays one step and
    cannot capture MoE routing or speculation branches)."""
    notes = []
    if opt.schedule_offloading > 1:
        notes.append(
            "schedule_offloading does not apply to gpu execution (the host launches every step); ignored"
        )
    return 1, notes


def assign_calls(ops: List[Op], hw, opt) -> Tuple[List[Op], List[dict], List[str]]:
    notes = []
    if opt.kernel_looping:
        notes.append("kernel_looping does not apply to gpu execution (no looped kernel calls); ignored")
    if opt.orchestration == "hardware":
        notes.append("orchestration=hardware does not apply to gpu execution; ignored")
    if opt.fusion == "layer":
        notes.append("fusion=layer does not apply to gpu execution (one kernel per operator); ignored")
    if opt.batch_streaming:
        notes.append(
            "batch_streaming does not apply to gpu execution (no looped layer kernel "
            "with a loop buffer); ignored"
        )
    launch = 0.0 if opt.cuda_graphs else hw.launch_us * 1e-6
    calls = []
    for i, op in enumerate(ops):
        op.call = i
        calls.append(
            {
                "repeat": op.repeat,
                "launch_async": launch,
                "launch_each": hw.sync_us * 1e-6,
                "fill_each": 0.0,
                "launch_once": 0.0,
                "fill_once": 0.0,
                "overlap_link": False,
                "sample_gap": 0.0,
                "free_samples": 0.0,
            }
        )
    return ops, calls, notes
