"""Numpy reference of framework/fidelity/attention_kernel.py, written independently (whole-array
operations, no shared helpers) so tests can require the Numba kernel to match it: the same cache
states after prefill selection and after every decode step, the same attention outputs and
proxy metrics."""

from __future__ import annotations

import numpy as np

from decodelab.fidelity.attention_kernel import (
    EVICTED,
    H2O,
    KEPT,
    PINNED,
    POOL_AVG,
    POOL_MAX,
    QUEST,
    SNAPKV,
    SNAPSTREAM,
    STREAMING,
)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def snap_scores(q_obs, k, n_keys):
    H, w, D = q_obs.shape
    Hkv, P = k.shape[:2]
    G = H // Hkv
    qpos = np.arange(P - w, P)[:, None]
    out = np.zeros((H, n_keys))
    for h in range(H):
        s = (q_obs[h].astype(np.float64) @ k[h // G].T.astype(np.float64)) / np.sqrt(D)
        s[np.arange(P)[None, :] > qpos] = -np.inf
        out[h] = softmax(s).sum(0)[:n_keys]
    return out


def pool(x, kind, kernel):
    if kernel <= 1 or kind not in (POOL_AVG, POOL_MAX):
        return x.copy()
    r = kernel // 2
    pad = np.pad(x, ((0, 0), (r, r)), constant_values=0.0 if kind == POOL_AVG else -np.inf)
    win = np.lib.stride_tricks.sliding_window_view(pad, kernel, axis=1)
    return win.sum(-1) / kernel if kind == POOL_AVG else win.max(-1)


def _topk(scores, lo, hi, k):
    k = min(k, hi - lo)
    if k <= 0:
        return np.empty(0, np.int64)
    idx = np.arange(lo, hi)
    order = np.lexsort((idx, -scores[lo:hi]))  # score descending, then position
    return np.sort(idx[order[:k]])


def select_prompt(
    state, kind, sinks, window, obs, pool_kind, kernel, budgets, sel_of_head, q_obs, kp, colsum
):
    """q_obs [L, H, w, D] and kp [L, Hkv, P, D]: SnapKV's scores are computed here from them."""
    L, H = state.shape[:2]
    P = kp.shape[2]
    pos = np.arange(P)
    for l in range(L):
        st = np.full((H, P), KEPT, np.int8)
        if kind == STREAMING:
            st[:, (pos >= sinks) & (pos < P - window)] = EVICTED
            st[:, pos < sinks] = PINNED
        elif kind in (SNAPKV, SNAPSTREAM, H2O):
            w = min(obs, P)
            b = budgets[l]
            if kind == SNAPSTREAM:
                st[:, pos < P - window] = PINNED
            lo, hi, keep, fits = {
                SNAPKV: (0, P - w, b - w, P <= b),
                SNAPSTREAM: (sinks, P - window, b, P <= sinks + b + window),
                H2O: (0, P - window, b, P <= b + window),
            }[kind]
            if not fits:
                st[:, lo:hi] = EVICTED
                sc = (
                    colsum[l].astype(np.float64)
                    if kind == H2O
                    else pool(snap_scores(q_obs[l][:, q_obs.shape[2] - w :], kp[l], P - w), pool_kind, kernel)
                )
                for s in np.unique(sel_of_head):
                    heads = sel_of_head == s
                    idx = _topk(sc[heads].mean(0), lo, hi, keep)
                    for h in np.flatnonzero(heads):
                        st[h, idx] = PINNED if kind == SNAPSTREAM else KEPT
        state[l, :, :P] = st


def admit(state_l, score_l, kind, sinks, window, hh, pos, sel_of_head):
    state_l[:, pos] = KEPT
    old = pos - window
    if kind == STREAMING and old >= sinks:
        state_l[:, old] = EVICTED
    elif kind == SNAPSTREAM:
        for h in range(state_l.shape[0]):
            ring = np.flatnonzero(state_l[h, : pos + 1] == KEPT)
            if (state_l[h, : pos + 1] > 0).sum() > sinks + hh + window and len(ring):
                state_l[h, ring[0]] = EVICTED
    elif kind == H2O:
        for s in np.unique(sel_of_head):
            heads = np.flatnonzero(sel_of_head == s)
            held = state_l[heads[0], : pos + 1] > 0
            if held.sum() <= hh + window:
                continue
            cand = np.flatnonzero(held[: pos - window + 1])
            if len(cand):
                tot = score_l[heads][:, cand].astype(np.float64).sum(0)
                state_l[np.ix_(heads, [cand[np.argmin(tot)]])] = EVICTED


def quest_read(q, k_all, G, g, page, top):
    """0/1 over positions: the `top` pages of the best summed upper bound, the newest always."""
    n, D = k_all.shape
    n_pages = -(-n // page)
    padded = np.full((n_pages * page, D), np.nan)
    padded[:n] = k_all
    blocks = padded.reshape(n_pages, page, D)
    kmin, kmax = np.nanmin(blocks, 1), np.nanmax(blocks, 1)
    qg = q[g * G : (g + 1) * G].astype(np.float64)  # [G, D]
    ub = np.maximum(qg[:, None, :] * kmin[None], qg[:, None, :] * kmax[None]).sum((0, 2))
    ub[-1] = np.inf
    pages = _topk(ub, 0, n_pages, top)
    read = np.zeros(n, np.int8)
    for p in pages:
        read[p * page : (p + 1) * page] = 1
    return read


def decode_step(
    l,
    q,
    k_all,
    v_all,
    state_l,
    score_l,
    kind,
    sinks,
    window,
    hh,
    page,
    top_pages,
    dense_layers,
    sel_of_head,
    needle,
):
    """One variant, one layer: k_all/v_all [Hkv, n, D] hold every token 0..n-1 (the new one
    last). Returns out [H, D] and metrics [H, 4]; updates state_l / score_l in place."""
    H, D = q.shape
    Hkv, n = k_all.shape[:2]
    G = H // Hkv
    admit(state_l, score_l, kind, sinks, window, hh, n - 1, sel_of_head)
    out = np.zeros((H, D))
    met = np.zeros((H, 4))
    for g in range(Hkv):
        quest = kind == QUEST and l >= dense_layers
        read_q = quest_read(q, k_all[g], G, g, page, top_pages) if quest else np.ones(n, np.int8)
        for h in range(g * G, (g + 1) * G):
            logits = k_all[g].astype(np.float64) @ q[h].astype(np.float64) / np.sqrt(D)
            p_full = softmax(logits)
            read = (state_l[h, :n] > 0) & (read_q > 0)
            p_pol = np.where(read, p_full, 0.0)
            p_pol /= p_pol.sum()
            o_full, o_pol = p_full @ v_all[g], p_pol @ v_all[g]
            out[h] = o_pol
            if kind == H2O:
                score_l[h, :n] += p_pol * read
            lo, hi = needle
            met[h] = [
                p_full[read].sum(),
                np.linalg.norm(o_pol - o_full) / np.linalg.norm(o_full),
                read.sum(),
                read[lo:hi].mean() if hi > lo else 0.0,
            ]
    return out, met
