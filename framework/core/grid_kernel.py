"""The decode walk of many designs in one Numba call (`decodelab grid`, framework/core/grid.py).

Designs that share every kernel array but the memory tiers' bandwidths (`tier_bws[d]`) and the
request rows (`steps`: row 0 the prefill, then the decode rows) are evaluated together. Each
step's time is `kernel.step_time`'s -- the kernel's own code, not a copy of its cost model.

The decode rows are summed in closed form where that is exact: on a run of rows where the
attended context x grows by a constant per row (between the KV policy's caps and window
breakpoints), every cost of a step is affine in x as long as each branch of the step's cost
(per call: memory- or compute-bound, the ideal vs achieved time, link overlap, which tiers hold
bytes; per step: launches exposed or hidden, compute-bound time past the sustained-clock onset)
goes the same way. Each branch is a comparison of two affine functions of x, so the rows where a
set of branches holds form an interval: when both ends of a run take the same branches, every row
between does too, and the run's sum is (rows) x (first + last) / 2. Otherwise the run is halved
until it is. Not affine, and so walked row by row: a call whose bytes span tiers of different
bandwidth under a bandwidth ramp (bw_half > 0: memory spilled to DDR), and fitted decode-attention
laws (a p-norm in x; `walk=True`). `tests/test_grid.py` checks the sums against the row-by-row walk
and `evaluate()`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core import kernel as K
from decodelab.kernel_layout import Acc, Call, Cause, Hw, Layout, Link, Step

# branch bits of one call (sig[c], bit 1 << Branch.*): which way each max/min/if of kernel.step_core went
Branch = Layout(
    "Branch", "ACTIVE", "TOTAL", "FLOPS", "MEMA", "LINK", "IDEAL", "MEMI", "EXPOSED", "CTX", "SUST"
)
_NONAFFINE = -1  # a call whose memory time is not affine in x: walk the rows


@njit(cache=True)
def _signature(call_rep, call_cost, tier_bw, hw, ctx, acc_bytes, acc_flops, acc_link, sig):
    """Branches of the step kernel.step_core just costed (its accumulators are still in acc_*)."""
    n_calls = acc_flops.shape[0]
    n_tiers = tier_bw.shape[0]
    peak = hw[Hw.PEAK_FLOPS]
    host, device = K.dispatch_device(call_rep, call_cost, acc_flops)
    host_bound = host > device  # the step's launches exposed (kernel._step_body): marked on every call
    # the step's compute-bound time past the sustained-clock onset (kernel.sustained): marked likewise
    throttled = hw[Hw.SUST_SLOW] > 0.0 and K.compute_busy(acc_flops) > hw[Hw.SUST_AFTER]
    for c in range(n_calls):
        if acc_flops[c, Acc.ACTIVE] == 0.0:
            sig[c] = 0
            continue
        bits = 1 << Branch.ACTIVE
        if ctx >= 1.0:
            bits |= 1 << Branch.CTX
        total = 0.0
        mem_i = 0.0
        first_bw = -1.0
        mixed = False
        for t in range(n_tiers):
            if acc_bytes[c, t] != 0.0:
                bits |= 1 << (16 + t)
                if first_bw < 0.0:
                    first_bw = tier_bw[t]
                elif tier_bw[t] != first_bw:
                    mixed = True
            total += acc_bytes[c, t]
            mem_i += acc_bytes[c, t] / tier_bw[t]
        if mixed and hw[Hw.BW_HALF] > 0.0:
            sig[c] = _NONAFFINE
            continue
        mem_a = 0.0
        if total > 0.0:
            bits |= 1 << Branch.TOTAL
            mem_a = mem_i / K._eff(total, hw[Hw.BW_EFF_MAX], hw[Hw.BW_HALF])
        comp_i = acc_flops[c, Acc.FLOPS] / peak
        comp_a = 0.0
        if acc_flops[c, Acc.FLOPS] > 0.0:
            bits |= 1 << Branch.FLOPS
            comp_a = (acc_flops[c, Acc.WORK] + hw[Hw.C_HALF]) / (peak * hw[Hw.C_EFF_MAX])
        link = 0.0
        if acc_link[c, Link.BYTES] > 0.0:
            link = acc_link[c, Link.BYTES] / hw[Hw.LINK_BW]
        if acc_flops[c, Acc.LAW] > 0.0:
            ach = acc_flops[c, Acc.LAW_T]
        else:
            if mem_a >= comp_a:
                bits |= 1 << Branch.MEMA
            ach = max(mem_a, comp_a)
        if call_cost[c, Call.OVERLAP_LINK] > 0.0 and ach >= link:
            bits |= 1 << Branch.LINK
        if max(mem_i, comp_i) <= ach:
            bits |= 1 << Branch.IDEAL
        if mem_i >= comp_i:
            bits |= 1 << Branch.MEMI
        if host_bound:
            bits |= 1 << Branch.EXPOSED
        if throttled:
            bits |= 1 << Branch.SUST
        sig[c] = bits


@njit(cache=True)
def _row(
    op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, steps, r, acc_b, acc_f, acc_l, out, sig
):
    for k in range(out.shape[0]):
        out[k] = 0.0
    K.step_time(
        op_call,
        op_w,
        op_lin,
        call_rep,
        call_cost,
        tier_bw,
        kv_frac,
        hw,
        steps[r, Step.QTOK],
        steps[r, Step.CTX],
        steps[r, Step.SEQS],
        steps[r, Step.OUT],
        steps[r, Step.PREFILL],
        acc_b,
        acc_f,
        acc_l,
        out,
    )
    _signature(call_rep, call_cost, tier_bw, hw, steps[r, Step.CTX], acc_b, acc_f, acc_l, sig)


@njit(cache=True)
def _walk(
    op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, steps, acc_b, acc_f, acc_l, g, sig, out
):
    """Add every decode row's (1..n-1) seconds by cause to out: the step walk, where the closed
    form does not hold."""
    for r in range(1, steps.shape[0]):
        _row(
            op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, steps, r, acc_b, acc_f, acc_l, g, sig
        )  # fmt: skip
        for k in range(Cause.size):
            out[k] += g[k]


@njit(cache=True)
def _same(sa, sb):
    for c in range(sa.shape[0]):
        if sa[c] != sb[c] or sa[c] == _NONAFFINE:
            return False
    return True


@njit(cache=True)
def _any_nonaffine(s):
    for c in range(s.shape[0]):
        if s[c] == _NONAFFINE:
            return True
    return False


@njit(cache=True)
def pieces(steps):
    """Runs [a, b] of decode rows (1..n-1) over which the attended context grows by a constant."""
    n = steps.shape[0]
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    k = 0
    a = 1
    while a < n:
        b = a
        if a + 1 < n:
            b = a + 1
            d = steps[a + 1, Step.CTX] - steps[a, Step.CTX]
            while b + 1 < n and steps[b + 1, Step.CTX] - steps[b, Step.CTX] == d:
                b += 1
        starts[k] = a
        ends[k] = b
        k += 1
        a = b + 1
    return starts[:k], ends[:k]


@njit(cache=True)
def decode_grid(op_call, op_w, op_lin, call_rep, call_cost, tier_bws, kv_frac, hw, steps, walk):
    """For each design d (its tier bandwidths tier_bws[d]): the prefill row's seconds by cause
    (prefill[d]), the decode rows' summed seconds by cause (decode[d]) and the number of rows
    it costed (rows[d]; n - 1 decode rows + 1 when walked)."""
    n_d = tier_bws.shape[0]
    n_calls = call_rep.shape[0]
    n_t = tier_bws.shape[1]
    prefill = np.zeros((n_d, Cause.size))
    decode = np.zeros((n_d, Cause.size))
    rows = np.zeros(n_d, dtype=np.int64)
    acc_b = np.zeros((n_calls, n_t))
    acc_f = np.zeros((n_calls, Acc.size))
    acc_l = np.zeros((n_calls, Link.size))
    ga = np.zeros(Cause.size)
    gb = np.zeros(Cause.size)
    sa = np.zeros(n_calls, dtype=np.int64)
    sb = np.zeros(n_calls, dtype=np.int64)
    starts, ends = pieces(steps)
    n = steps.shape[0]
    stack = np.empty((2 * n + 2, 2), dtype=np.int64)
    for d in range(n_d):
        bw = tier_bws[d]
        _row(
            op_call,
            op_w,
            op_lin,
            call_rep,
            call_cost,
            bw,
            kv_frac,
            hw,
            steps,
            0,
            acc_b,
            acc_f,
            acc_l,
            prefill[d],
            sa,
        )
        cnt = 1
        if walk:
            _walk(
                op_call, op_w, op_lin, call_rep, call_cost, bw, kv_frac, hw, steps, acc_b, acc_f, acc_l, ga, sa,
                decode[d],
            )  # fmt: skip
            rows[d] = n
            continue
        top = 0
        nonaffine = False
        for p in range(starts.shape[0]):
            stack[top, 0] = starts[p]
            stack[top, 1] = ends[p]
            top += 1
        while top > 0:
            top -= 1
            a = stack[top, 0]
            b = stack[top, 1]
            _row(
                op_call,
                op_w,
                op_lin,
                call_rep,
                call_cost,
                bw,
                kv_frac,
                hw,
                steps,
                a,
                acc_b,
                acc_f,
                acc_l,
                ga,
                sa,
            )
            cnt += 1
            if a == b:
                for k in range(Cause.size):
                    decode[d, k] += ga[k]
                continue
            _row(
                op_call,
                op_w,
                op_lin,
                call_rep,
                call_cost,
                bw,
                kv_frac,
                hw,
                steps,
                b,
                acc_b,
                acc_f,
                acc_l,
                gb,
                sb,
            )
            cnt += 1
            if _any_nonaffine(sa) or _any_nonaffine(sb):
                nonaffine = True
                break
            if _same(sa, sb):
                m = float(b - a + 1)
                for k in range(Cause.size):
                    decode[d, k] += m * (ga[k] + gb[k]) / 2.0
            elif b == a + 1:
                for k in range(Cause.size):
                    decode[d, k] += ga[k] + gb[k]
            else:
                mid = (a + b) // 2
                stack[top, 0] = a
                stack[top, 1] = mid
                stack[top + 1, 0] = mid + 1
                stack[top + 1, 1] = b
                top += 2
        if nonaffine:  # a call's memory time is not affine in x: walk every row
            for k in range(Cause.size):
                decode[d, k] = 0.0
            _walk(
                op_call, op_w, op_lin, call_rep, call_cost, bw, kv_frac, hw, steps, acc_b, acc_f, acc_l, ga, sa,
                decode[d],
            )  # fmt: skip
            cnt += n - 1
        rows[d] = cnt
    return prefill, decode, rows
