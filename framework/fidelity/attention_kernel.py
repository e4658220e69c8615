"""Numba kernels of the fidelity runs: which KV tokens each policy keeps (at prefill and after every
decode step) and the masked decode attention over them, with the proxy metrics.

Plain arrays only. A variant's cache state is `state[L, H, N]` (int8, one row per query head so
every granularity fits: heads of one selector share a row's values): 0 evicted, 1 kept and
evictable (recent window, ring, heavy hitters), 2 pinned (sinks, SnapStream's frozen top-K).
Positions are absolute; the prompt's KV lives in the shared `kp/vp[L, Hkv, P, D]` of the
variant's prefill, decoded tokens in the variant's own `kd/vd[L, Hkv, T, D]`.
framework/fidelity/reference.py is the numpy reference these must match.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FULL, STREAMING, SNAPKV, SNAPSTREAM, H2O, QUEST = 0, 1, 2, 3, 4, 5
EVICTED, KEPT, PINNED = 0, 1, 2
POOL_NONE, POOL_AVG, POOL_MAX = 0, 1, 2
# integer parameters of a variant, columns of `iparams`
P_KIND, P_SINKS, P_WINDOW, P_PAGE, P_TOPPAGES, P_DENSE, P_OBS, P_POOL, P_KERNEL = range(9)
N_IPARAMS = 9


@njit(cache=True)
def pool1d(x, kind, kernel):
    """Centred 1-D pooling along the last axis, stride 1 (torch avg_pool1d with zero padding and
    count_include_pad; max_pool1d ignores the padding)."""
    out = np.empty_like(x)
    n, r = x.shape[1], kernel // 2
    for h in range(x.shape[0]):
        for j in range(n):
            if kind == POOL_NONE or kernel <= 1:
                out[h, j] = x[h, j]
                continue
            acc = 0.0 if kind == POOL_AVG else -np.inf
            for i in range(max(0, j - r), min(n, j + r + 1)):
                acc = acc + x[h, i] if kind == POOL_AVG else max(acc, x[h, i])
            out[h, j] = acc / kernel if kind == POOL_AVG else acc
    return out


@njit(cache=True)
def top_k(scores, lo, hi, k):
    """Indices of the k largest scores[lo:hi] (ties: lower index first), as absolute positions."""
    k = min(k, hi - lo)
    if k <= 0:
        return np.empty(0, np.int64)
    order = np.argsort(-scores[lo:hi], kind="mergesort")
    return np.sort(order[:k]) + lo


@njit(cache=True)
def _selector_mean(x, sel_of_head, s):
    acc = np.zeros(x.shape[1], np.float64)
    n = 0
    for h in range(x.shape[0]):
        if sel_of_head[h] == s:
            acc += x[h]
            n += 1
    return acc / max(n, 1)


@njit(cache=True)
def select_prompt(state, ip, budgets, sel_of_head, scores, P):
    """Fill state[L, H, :P] after a prefill of P tokens. budgets[L]: SnapKV/PyramidKV prompt
    tokens kept (window included), SnapStream top-K, H2O heavy hitters. scores[L, H, M]: SnapKV's
    window scores of keys 0..M-1 (M = P - obs window; model.window_scores) for SnapKV/SnapStream,
    pooled here; the attention each key received from all prompt queries (M = P) for H2O."""
    L, H = state.shape[0], state.shape[1]
    kind, sinks, window = ip[P_KIND], ip[P_SINKS], ip[P_WINDOW]
    n_sel = sel_of_head.max() + 1
    for l in range(L):
        st = state[l]
        st[:, :P] = KEPT
        if kind == FULL or kind == QUEST:
            continue
        if kind == STREAMING:
            for j in range(P):
                if j < sinks:
                    st[:, j] = PINNED
                elif j < P - window:
                    st[:, j] = EVICTED
            continue
        budget = budgets[l]
        w = min(ip[P_OBS], P)
        if kind == H2O:
            if P <= budget + window:
                continue
            lo, hi, keep = 0, P - window, budget
        elif kind == SNAPKV:
            if P <= budget:
                continue
            lo, hi, keep = 0, P - w, budget - w
        else:  # SNAPSTREAM: [sinks | frozen top-K | ring]
            for j in range(max(0, P - window)):
                st[:, j] = PINNED
            if P <= sinks + budget + window:
                continue
            lo, hi, keep = sinks, P - window, budget
        st[:, lo:hi] = EVICTED
        if kind == H2O:
            sc = scores[l].astype(np.float64)
        else:
            sc = pool1d(scores[l][:, : P - w].astype(np.float64), ip[P_POOL], ip[P_KERNEL])
        for s in range(n_sel):
            idx = top_k(_selector_mean(sc, sel_of_head, s), lo, hi, keep)
            for h in range(H):
                if sel_of_head[h] == s:
                    for j in idx:
                        st[h, j] = PINNED if kind == SNAPSTREAM else KEPT


@njit(cache=True)
def admit(state_l, score_l, ip, hh, pos, sel_of_head):
    """The token at `pos` enters the cache of one layer (state_l [H, N]); evict by the policy.
    hh: H2O heavy hitters, SnapStream's frozen K."""
    kind, sinks, window = ip[P_KIND], ip[P_SINKS], ip[P_WINDOW]
    H = state_l.shape[0]
    state_l[:, pos] = KEPT
    old = pos - window
    if kind == STREAMING and old >= sinks:
        state_l[:, old] = EVICTED
    elif kind == SNAPSTREAM:  # slot of sinks + K + R full: the ring's oldest leaves
        for h in range(H):
            n, first = 0, -1
            for j in range(pos + 1):
                if state_l[h, j] > 0:
                    n += 1
                    if first < 0 and state_l[h, j] == KEPT:
                        first = j
            if n > sinks + hh + window and first >= 0:
                state_l[h, first] = EVICTED
    elif kind == H2O:
        for s in range(sel_of_head.max() + 1):
            h0 = np.argmax(sel_of_head == s)
            n = 0
            for j in range(pos + 1):
                n += state_l[h0, j] > 0
            if n <= hh + window:
                continue
            best, arg = np.inf, -1
            for j in range(pos - window + 1):  # outside the recent window
                if state_l[h0, j] > 0:
                    v = 0.0
                    for h in range(H):
                        if sel_of_head[h] == s:
                            v += score_l[h, j]
                    if v < best:
                        best, arg = v, j
            if arg >= 0:
                for h in range(H):
                    if sel_of_head[h] == s:
                        state_l[h, arg] = EVICTED


@njit(cache=True)
def quest_pages(q, kp_g, kd_g, P, n, G, g, page, top):
    """Quest: per-page upper bound sum_d max(q_d min_d, q_d max_d) of the group's G query heads
    (q [H, D]) summed; the `top` best pages, the newest (partial) page always among them. Returns
    a 0/1 array over positions 0..n-1."""
    D = q.shape[1]
    n_pages = (n + page - 1) // page
    ub = np.zeros(n_pages, np.float64)
    kmin = np.empty(D)
    kmax = np.empty(D)
    for p in range(n_pages):
        kmin[:] = np.inf
        kmax[:] = -np.inf
        for j in range(p * page, min(n, (p + 1) * page)):
            for d in range(D):
                x = kp_g[j, d] if j < P else kd_g[j - P, d]
                kmin[d] = min(kmin[d], x)
                kmax[d] = max(kmax[d], x)
        for h in range(g * G, (g + 1) * G):
            for d in range(D):
                ub[p] += max(q[h, d] * kmin[d], q[h, d] * kmax[d])
    ub[n_pages - 1] = np.inf
    read = np.zeros(n, np.int8)
    for p in top_k(ub, 0, n_pages, top):
        read[p * page : min(n, (p + 1) * page)] = 1
    return read


@njit(cache=True, fastmath=True)
def decode_layer(
    l, t, q, k_new, v_new, kp, vp, grp, kd, vd, state, score, iparams, hh, sel_of_head, needle, out, metrics
):
    """One decode step of layer l for every variant b: the new token (position P + t) enters each
    variant's cache (admit), then each query head attends the tokens its policy reads.
    q [B, H, D]; k_new, v_new [B, Hkv, D]; kp, vp [n_groups, L, Hkv, P, D]; kd, vd [B, L, Hkv, T, D];
    state [B, L, H, N]; score [B, L, H, N] (H2O accumulators); hh [B]: H2O heavy hitters;
    needle [2]: positions [lo, hi) to track (lo = hi: none). Writes out [B, H, D] and adds to
    metrics [B, L, H, 4]: attention-mass recall (share of the full-cache softmax mass on the
    tokens read), relative error of the output vs attending every token, tokens read, needle
    tokens read / needle length."""
    B, H, D = q.shape
    Hkv, P = kp.shape[2], kp.shape[3]
    G = H // Hkv
    pos = P + t
    n = pos + 1
    scale = np.float32(1.0 / np.sqrt(D))
    logit = np.empty(n, np.float32)
    wpol = np.empty(n, np.float32)
    o_full = np.empty(D, np.float32)
    o_pol = np.empty(D, np.float32)
    read = np.ones(n, np.int8)
    for b in range(B):
        kd[b, l, :, t] = k_new[b]
        vd[b, l, :, t] = v_new[b]
        admit(state[b, l], score[b, l], iparams[b], hh[b], pos, sel_of_head[b])
    for g in range(Hkv):  # variants inside: one KV head's prompt stays in cache
        for b in range(B):
            ip = iparams[b]
            kpg, vpg = kp[grp[b], l, g], vp[grp[b], l, g]
            kdg, vdg = kd[b, l, g], vd[b, l, g]
            quest = ip[P_KIND] == QUEST and l >= ip[P_DENSE]
            if quest:
                read = quest_pages(q[b], kpg, kdg, P, n, G, g, ip[P_PAGE], ip[P_TOPPAGES])
            for h in range(g * G, (g + 1) * G):
                st = state[b, l, h]
                qh = q[b, h]
                m = np.float32(-np.inf)
                for j in range(P):
                    acc = np.float32(0.0)
                    for d in range(D):
                        acc += qh[d] * kpg[j, d]
                    logit[j] = acc * scale
                    m = max(m, logit[j])
                for j in range(P, n):
                    acc = np.float32(0.0)
                    for d in range(D):
                        acc += qh[d] * kdg[j - P, d]
                    logit[j] = acc * scale
                    m = max(m, logit[j])
                tot_full, tot_pol, n_read, needle_read = 0.0, 0.0, 0, 0
                for j in range(n):
                    e = np.exp(logit[j] - m)
                    logit[j] = e
                    tot_full += e
                    if st[j] > 0 and (not quest or read[j] > 0):
                        wpol[j] = e
                        tot_pol += e
                        n_read += 1
                        if needle[0] <= j < needle[1]:
                            needle_read += 1
                    else:
                        wpol[j] = 0.0
                o_full[:] = 0.0
                o_pol[:] = 0.0
                for j in range(P):
                    e, wp = logit[j], wpol[j]
                    for d in range(D):
                        o_full[d] += e * vpg[j, d]
                        o_pol[d] += wp * vpg[j, d]
                for j in range(P, n):
                    e, wp = logit[j], wpol[j]
                    for d in range(D):
                        o_full[d] += e * vdg[j - P, d]
                        o_pol[d] += wp * vdg[j - P, d]
                err, ref = 0.0, 0.0
                for d in range(D):
                    of = o_full[d] / tot_full
                    op = o_pol[d] / tot_pol
                    out[b, h, d] = op
                    err += (op - of) ** 2
                    ref += of**2
                if ip[P_KIND] == H2O:
                    for j in range(n):
                        score[b, l, h, j] += wpol[j] / tot_pol
                metrics[b, l, h, 0] += tot_pol / tot_full
                metrics[b, l, h, 1] += np.sqrt(err / max(ref, 1e-30))
                metrics[b, l, h, 2] += n_read
                if needle[1] > needle[0]:
                    metrics[b, l, h, 3] += needle_read / (needle[1] - needle[0])


@njit(cache=True)
def held_tokens(state, n, Hkv):
    """Tokens a KV head holds (the union of its query heads' rows), mean over layers and KV
    heads: the memory the policy needs. state [L, H, N]; positions 0..n-1."""
    L, H = state.shape[0], state.shape[1]
    G = H // Hkv
    tot = 0.0
    for l in range(L):
        for g in range(Hkv):
            for j in range(n):
                for h in range(g * G, (g + 1) * G):
                    if state[l, h, j] > 0:
                        tot += 1.0
                        break
    return tot / (L * Hkv)
