"""When the serving scheduler reads new requests (engine.recv_interval; scheduler.py serve and its
pure-Python mirror reference.py Recv).

SGLang's `--scheduler-recv-interval N` (server_args default 1; srt/managers/scheduler_recv_skipper.py
SchedulerRecvSkipper, created only for N > 1): before each scheduling round a counter adds the weight
of the last batch's forward mode, SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE 1 (and _TARGET_VERIFY 1:
a decode step of speculative decoding), _DEFAULT 1000 (an extend or mixed batch: a step with prefill
work), _NONE 1 (no batch); the request socket is read only when the counter reaches N, and the
counter is then reset (srt/environ.py). So during pure decoding a new request waits up to N decode
steps before it is even queued, while the round right after a prefill step reads it. An engine that
ran no step since the last round (idle, or nothing fit) spins through empty rounds of weight 1 each,
microseconds apart: it reads at once. Interval 1 reads every round (every other engine)."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.modes.serving.layout import Cnt, Ix, Recv, Req, State
from decodelab.modes.serving.parts import _enqueue

DECODE_WEIGHT = 1.0  # SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE (and _TARGET_VERIFY)
PREFILL_WEIGHT = 1000.0  # SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT (extend, mixed)


@njit(cache=True)
def poll(recv, interval) -> bool:
    """Whether this scheduling round reads the requests that have arrived (module docstring)."""
    if interval <= 1.0:
        return True
    w = recv[Recv.WEIGHT]
    recv[Recv.WEIGHT] = 0.0
    recv[Recv.COUNT] += w
    if w == 0.0 or recv[Recv.COUNT] >= interval:  # no step since the last round, or the interval
        recv[Recv.COUNT] = 0.0
        return True
    return False


@njit(cache=True)
def stepped(recv, prefill_work) -> None:
    """Record the weight of the step just run (with prefill work or decode only)."""
    recv[Recv.WEIGHT] = PREFILL_WEIGHT if prefill_work else DECODE_WEIGHT


@njit(cache=True)
def receive(arrival, cut, next_arr, req, ix, cnt, pre_len, order):
    """Queue the requests that arrived by `cut` (in arrival order, from `next_arr`); returns the
    next request not yet arrived."""
    n = arrival.shape[0]
    while next_arr < n and not np.isnan(arrival[next_arr]) and arrival[next_arr] <= cut:
        ix[Ix.STATE, next_arr] = State.WAIT
        req[next_arr, Req.ARRIVAL] = arrival[next_arr]
        cnt[Cnt.WAIT] = _enqueue(ix[Ix.WQ], cnt[Cnt.WAIT], next_arr, pre_len, order)
        next_arr += 1
    return next_arr
