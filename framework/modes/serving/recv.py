"""When the serving scheduler reads new requests (engine.recv_interval; scheduler.py serve and its
pure-Python mirror reference_recv.py), and when it lets them into a step (batch waiting).

SGLang's `--scheduler-recv-interval N` (server_args default 1; srt/managers/scheduler_recv_skipper.py
SchedulerRecvSkipper, created only for N > 1): before each scheduling round a counter adds the weight
of the last batch's forward mode, SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE 1 (and _TARGET_VERIFY 1:
a decode step of speculative decoding), _DEFAULT 1000 (an extend or mixed batch: a step with prefill
work), _NONE 1 (no batch); the request socket is read only when the counter reaches N, and the
counter is then reset (srt/environ.py). So during pure decoding a new request waits up to N decode
steps before it is even queued, while the round right after a prefill step reads it. An engine that
ran no step since the last round (idle, or nothing fit) spins through empty rounds of weight 1 each,
microseconds apart: it reads at once. Interval 1 reads every round (every other engine).

TensorRT-LLM's attention-DP balance (attention_dp_config.enable_balance; tensorrt_llm/_torch/pyexecutor/
py_executor.py PyExecutor._balance_adp_requests, called at every iteration's scheduling): the ranks
gather their scheduled context and generation counts; a rank's new prompts are prefilled only if every
rank has one (and a free slot), then after batching_wait_iters more iterations; otherwise a counter
advances each iteration, with or without prompts waiting, and at timeout_iters (or when some rank has
no generation request) it resets and releases whatever waits. So the counter runs free: with prompts
arriving one by one, they are released every timeout_iters iterations, a prompt waiting on average
half of that. One group is simulated (the others are its copies, simulate.py), so `released` reads
arrivals once ADP_RELEASE steps have run since the last release or when the group runs nothing;
balance_rounds sets ADP_RELEASE from the timeout and the median time until every other group has a
new prompt too.

TensorRT-LLM's batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio; defaults 0 and 0,
off; PyExecutor._schedule and _waiting_requests, tensorrt_llm/_torch/pyexecutor/py_executor.py): without
attention DP, an iteration whose scheduled batch holds both context and generation requests counts its
tokens, each context request's whole prompt (`len(get_tokens(0))`) plus 1 + its draft tokens per
generation request. Unless the iterations held so far reach the timeout or the tokens reach ratio x
max_num_tokens, the context requests are left out of the iteration (they stay active for the next) and
the count of held iterations goes up; otherwise it is reset and they run. An iteration without
generation requests never waits; one without context requests leaves the count as it is. So with
timeout 0 or ratio 0 nothing is ever held. `batch_held` is that test, the count in fb[Fb.WAITED]."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from decodelab.modes.serving.layout import Cnt, Eng, Fb, Ix, Recv, Req, State
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
    recv[Recv.STEPS] += 1.0


@njit(cache=True)
def released(recv, period, running) -> bool:
    """Whether the attention-DP balance lets this round read new requests (module docstring):
    `period` steps since the last release, or a group with no running sequence; <= 1 every round."""
    if period <= 1.0 or running == 0 or recv[Recv.STEPS] >= period:
        recv[Recv.STEPS] = 0.0
        return True
    return False


@njit(cache=True)
def reads(recv, interval, period, running) -> bool:
    """Whether this round reads new requests: a polling round (engine.recv_interval) that the
    attention-DP balance releases (asked on polling rounds only: no engine has both)."""
    return poll(recv, interval) and released(recv, period, running)


def balance_rounds(
    groups: int, timeout: int, wait: int, clients: float, mean_output: float, tokens_per_step: float
) -> float:
    """Steps between the attention-DP balance's releases for one of `groups` groups (Eng.ADP_RELEASE):
    the timeout, unless every other group has a new prompt sooner. A closed loop's group of `clients`
    gets a prompt each time one ends: about clients x tokens_per_step / mean_output per step, Poisson
    in each group; the median number of steps until all groups - 1 others have had one solves
    (1 - exp(-rate s))^(groups - 1) = 1/2; then `wait` more steps. Without clients (an open loop: its
    rate per step is not known before the steps) the timeout. 1 (every round) with one group."""
    if groups <= 1:
        return 1.0
    rate = clients * tokens_per_step / mean_output if clients > 0 and mean_output > 0 else 0.0
    all_have = -math.log(1.0 - 0.5 ** (1.0 / (groups - 1))) / rate if rate > 0 else math.inf
    return max(1.0, float(timeout) if all_have >= timeout else all_have + wait)


@njit(cache=True)
def batch_held(fb, eng, tokens) -> bool:
    """Whether batch waiting leaves this step's prompts out (module docstring); `tokens` the step's
    prompts' whole lengths plus its decoding sequences' tokens."""
    if eng[Eng.WAIT_ITERS] <= 0.0 or eng[Eng.WAIT_TOKENS] <= 0.0:
        return False  # a zero timeout or ratio stops every wait at once
    if fb[Fb.WAITED] >= eng[Eng.WAIT_ITERS] or tokens >= eng[Eng.WAIT_TOKENS]:
        fb[Fb.WAITED] = 0.0
        return False
    fb[Fb.WAITED] += 1.0
    return True


@njit(cache=True)
def sent_order(arrival):
    """(the requests whose send is known before the run -- a prefix: an open loop's every one, a
    closed loop's first requests -- in order of arrival, ties by index; how many). The rest are
    issued during the run, in index order, each once its client's last request has ended."""
    m = 0
    while m < arrival.shape[0] and not np.isnan(arrival[m]):
        m += 1
    return np.argsort(arrival[:m], kind="mergesort"), m


@njit(cache=True)
def receive(arrival, cut, rp, by_arr, m, req, ix, cnt, pre_len, order):
    """Queue every request that has arrived by `cut`, whatever its index: the known sends in
    arrival order (`by_arr` from `rp[0]`), then the issued ones (index `rp[1]` on, arrival times set
    as they are sent, up to the first not yet issued). An engine reads whatever has reached it: a
    request sent later that arrives sooner (a shorter prompt to tokenize, a disaggregated prefill
    that ended first) is not held behind one still on its way. rp[1] becomes the first issued
    request not yet read."""
    p = rp[0]
    while p < m and arrival[by_arr[p]] <= cut:
        _read(by_arr[p], arrival, req, ix, cnt, pre_len, order)
        p += 1
    rp[0] = p
    n = arrival.shape[0]
    first = -1
    j = rp[1]
    while j < n and not np.isnan(arrival[j]):
        if ix[Ix.STATE, j] == State.NEW:
            if arrival[j] <= cut:
                _read(j, arrival, req, ix, cnt, pre_len, order)
            elif first < 0:
                first = j
        j += 1
    rp[1] = first if first >= 0 else j


@njit(cache=True)
def _read(i, arrival, req, ix, cnt, pre_len, order):
    ix[Ix.STATE, i] = State.WAIT
    req[i, Req.ARRIVAL] = arrival[i]
    cnt[Cnt.WAIT] = _enqueue(ix[Ix.WQ], cnt[Cnt.WAIT], i, pre_len, order)


@njit(cache=True)
def earliest(arrival, rp, by_arr, m, ix):
    """The first arrival of the requests sent and not yet read; inf when none is on its way."""
    best = arrival[by_arr[rp[0]]] if rp[0] < m else np.inf
    j = rp[1]
    while j < arrival.shape[0] and not np.isnan(arrival[j]):
        if ix[Ix.STATE, j] == State.NEW and arrival[j] < best:
            best = arrival[j]
        j += 1
    return best
