"""Jitted helpers of the serving scheduler (framework/modes/serving/scheduler.py): the waiting
queue, KV blocks, preemption and the three ways a step takes work (decoding sequences, prefill
chunks of running sequences, admissions of waiting ones; ready admissions for a disaggregated
decode pool). They share the scheduler's state: seq[SQ_*, i] and ix[IX_*, i] per request, cnt,
fb, adm, req (layout.py) and the engine vector eng[E_*]. Semantics: scheduler.py's docstring;
reference.py mirrors them."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core.kernel import P_PROMPT_CAP, P_TOTAL_CAP, causal_pairs
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving.layout import (
    C_PREEMPTS,
    C_RUN,
    C_SCHED,
    C_WAIT,
    E_BLOCK,
    E_CHUNK,
    E_MAX_BATCH,
    E_ORDER,
    E_PREEMPT,
    E_SLIDE,
    E_SLIDE_MEM,
    E_SPEC_K,
    E_WINDOW,
    F_BUDGET,
    F_FREE,
    F_PREFILL,
    IX_IN_STEP,
    IX_RUN,
    IX_SCHED,
    IX_STATE,
    IX_WQ,
    R_PREEMPT,
    R_START,
    SQ_BLOCKS,
    SQ_DONE,
    SQ_GEN,
    SQ_OUTPUT,
    SQ_PRE,
    SQ_PROMPT,
    SQ_Q,
    ST_RUN,
    ST_WAIT,
)


@njit(cache=True)
def held_tokens(p, g, caps):
    """KV tokens a sequence holds after its prefill and g >= 1 generated tokens."""
    kept = p
    if caps[P_PROMPT_CAP] > 0.0 and kept > caps[P_PROMPT_CAP]:
        kept = caps[P_PROMPT_CAP]
    n = kept + g - 1.0
    if caps[P_TOTAL_CAP] > 0.0 and n > caps[P_TOTAL_CAP]:
        n = caps[P_TOTAL_CAP]
    return n


@njit(cache=True)
def max_held_tokens(p, o, caps):
    """Largest KV a request of prompt p and o output tokens ever holds (the prompt before the
    policy selects, or the final cache)."""
    return max(p, held_tokens(p, o, caps))


@njit(cache=True)
def mem_tokens(n, eng):
    """KV-pool token-equivalents (one token of every layer = 1) of a sequence holding n tokens:
    a sliding-window layer holds the window (E_SLIDE_MEM < 0) or E_SLIDE_MEM x n (layout.py)."""
    slide = eng[E_SLIDE]
    if slide <= 0.0:
        return n
    r = eng[E_SLIDE_MEM]
    held = min(n, eng[E_WINDOW]) if r < 0.0 else r * n
    return (1.0 - slide) * n + slide * held


@njit(cache=True)
def full_tokens(x, eng):
    """Tokens of a full-attention layer that x pool token-equivalents hold (SGLang's reserve counts
    the full-layer pool: model_runner set_num_tokens_hybrid_swa); the window's share is left out."""
    slide = eng[E_SLIDE]
    if slide <= 0.0:
        return x
    return x / ((1.0 - slide) + slide * max(eng[E_SLIDE_MEM], 0.0))


@njit(cache=True)
def kv_blocks(n, eng):
    """KV blocks a sequence holding n tokens takes from the pool."""
    return np.ceil(mem_tokens(n, eng) / eng[E_BLOCK])


@njit(cache=True)
def read_tokens(q, a, eng):
    """KV token-equivalents a sequence's step reads when it adds q tokens and holds a after it: a
    sliding-window layer reads at most its window before each new token."""
    slide = eng[E_SLIDE]
    if slide <= 0.0:
        return a
    return (1.0 - slide) * a + slide * min(a, eng[E_WINDOW] + q - 1.0)


@njit(cache=True)
def window_pairs(q, a, w):
    """Causal (query, key) pairs of q queries at positions a - q + 1 .. a (1-based) when each
    sees at most w keys: query at position p sees min(p, w)."""
    lo = a - q + 1.0
    m = min(a, w)
    pairs = 0.0
    if m >= lo:
        pairs += (lo + m) * (m - lo + 1.0) / 2.0
    first = max(lo, w + 1.0)
    if a >= first:
        pairs += (a - first + 1.0) * w
    return max(pairs, q)


@njit(cache=True)
def layer_pairs(q, a, eng):
    """Layer-averaged causal pairs of q queries ending at context a (kernel.causal_pairs for a
    full-attention layer, window_pairs for a sliding one)."""
    full = causal_pairs(q, a)
    slide = eng[E_SLIDE]
    if slide <= 0.0:
        return full
    return (1.0 - slide) * full + slide * window_pairs(q, a, eng[E_WINDOW])


@njit(cache=True)
def _key(i, pre_len, order):
    return pre_len[i] if order == 1 else float(i)


@njit(cache=True)
def _enqueue(wq, n_wait, i, pre_len, order):
    """Insert request i into the waiting queue, ordered by (key, index)."""
    k = _key(i, pre_len, order)
    j = n_wait
    while j > 0:
        o = wq[j - 1]
        ko = _key(o, pre_len, order)
        if ko < k or (ko == k and o < i):
            break
        wq[j] = o
        j -= 1
    wq[j] = i
    return n_wait + 1


@njit(cache=True)
def _preempt_last(seq, ix, cnt, fb, req, order):
    """Preempt the newest running sequence: free its KV; it recomputes prompt + generated."""
    v = ix[IX_RUN, cnt[C_RUN] - 1]
    fb[F_FREE] += seq[SQ_BLOCKS, v]
    seq[SQ_BLOCKS, v] = 0.0
    seq[SQ_DONE, v] = 0.0
    seq[SQ_PRE, v] = seq[SQ_PROMPT, v] + seq[SQ_GEN, v]
    ix[IX_STATE, v] = ST_WAIT
    req[v, R_PREEMPT] += 1.0
    cnt[C_PREEMPTS] += 1
    cnt[C_WAIT] = _enqueue(ix[IX_WQ], cnt[C_WAIT], v, seq[SQ_PRE], order)
    cnt[C_RUN] -= 1
    return v


@njit(cache=True)
def _decode_part(seq, ix, cnt, fb, req, caps, eng):
    """Every running sequence past its prefill adds one token, or its k + 1 verified positions
    under in-engine MTP (E_SPEC_K = k), budget allowing."""
    preempt = eng[E_PREEMPT] > 0.0
    order = int(eng[E_ORDER])
    q = 1.0 + max(eng[E_SPEC_K], 0.0)
    j = 0
    while j < cnt[C_RUN] and fb[F_BUDGET] >= q:
        i = ix[IX_RUN, j]
        if seq[SQ_DONE, i] >= seq[SQ_PRE, i]:
            if preempt:
                need = (
                    kv_blocks(held_tokens(seq[SQ_PROMPT, i], seq[SQ_GEN, i] + q, caps), eng)
                    - seq[SQ_BLOCKS, i]
                )
                gone = False
                while need > fb[F_FREE]:
                    v = _preempt_last(seq, ix, cnt, fb, req, order)
                    if v == i:  # nothing newer to evict: the sequence preempts itself
                        gone = True
                        break
                if gone:
                    break
                if need > 0.0:
                    fb[F_FREE] -= need
                    seq[SQ_BLOCKS, i] += need
            ix[IX_SCHED, cnt[C_SCHED]] = i
            seq[SQ_Q, i] = q
            ix[IX_IN_STEP, i] = 1
            cnt[C_SCHED] += 1
            fb[F_BUDGET] -= q
        j += 1


@njit(cache=True)
def _schedule(i, q, seq, ix, cnt, fb):
    """Put `q` prefill tokens of sequence i into this step (out of the step's token budget)."""
    ix[IX_SCHED, cnt[C_SCHED]] = i
    seq[SQ_Q, i] = q
    ix[IX_IN_STEP, i] = 1
    cnt[C_SCHED] += 1
    fb[F_BUDGET] -= q
    fb[F_PREFILL] += q


@njit(cache=True)
def _prefill_part(seq, ix, cnt, fb, req, eng):
    """Running sequences part-way through their prefill take their next chunk."""
    chunk = eng[E_CHUNK]
    preempt = eng[E_PREEMPT] > 0.0
    order = int(eng[E_ORDER])
    j = 0
    while j < cnt[C_RUN] and fb[F_BUDGET] >= 1.0:
        i = ix[IX_RUN, j]
        rem = seq[SQ_PRE, i] - seq[SQ_DONE, i]
        j += 1
        if rem <= 0.0:
            continue
        q = min(rem, chunk if chunk > 0.0 else rem, fb[F_BUDGET])
        if q < rem and chunk <= 0.0:
            continue
        if preempt:
            need = kv_blocks(seq[SQ_DONE, i] + q, eng) - seq[SQ_BLOCKS, i]
            while need > fb[F_FREE] and cnt[C_RUN] > j and ix[IX_IN_STEP, ix[IX_RUN, cnt[C_RUN] - 1]] == 0:
                _preempt_last(seq, ix, cnt, fb, req, order)
            if need > fb[F_FREE]:
                continue
            fb[F_FREE] -= need
            seq[SQ_BLOCKS, i] += need
        _schedule(i, q, seq, ix, cnt, fb)


@njit(cache=True)
def _run_head(need, seq, ix, cnt, fb):
    """The head of the waiting queue starts running with `need` KV blocks."""
    i = ix[IX_WQ, 0]
    fb[F_FREE] -= need
    seq[SQ_BLOCKS, i] = need
    for k in range(cnt[C_WAIT] - 1):
        ix[IX_WQ, k] = ix[IX_WQ, k + 1]
    cnt[C_WAIT] -= 1
    ix[IX_STATE, i] = ST_RUN
    ix[IX_RUN, cnt[C_RUN]] = i
    cnt[C_RUN] += 1


@njit(cache=True)
def _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t):
    """Admit waiting requests head first; the first that does not fit (its KV, or the engine's
    admission reserve: admission.py) blocks the rest."""
    block = eng[E_BLOCK]
    chunk = eng[E_CHUNK]
    preempt = eng[E_PREEMPT] > 0.0
    max_batch = int(eng[E_MAX_BATCH])
    while cnt[C_WAIT] > 0 and cnt[C_RUN] < max_batch and fb[F_BUDGET] >= 1.0:
        i = ix[IX_WQ, 0]
        pre_len = seq[SQ_PRE, i]
        if seq[SQ_DONE, i] >= pre_len:  # KV already in the cache: _admit_ready's
            break
        q = min(pre_len, chunk if chunk > 0.0 else pre_len, fb[F_BUDGET])
        if chunk <= 0.0 and q < pre_len:
            break
        if preempt:
            need = kv_blocks(q, eng)
        else:
            need = kv_blocks(max_held_tokens(seq[SQ_PROMPT, i], seq[SQ_OUTPUT, i], caps), eng)
        if need > fb[F_FREE]:
            break
        rest = AD.left(seq[SQ_OUTPUT, i], seq[SQ_GEN, i], adm[AD.A_CLIP])
        if AD.blocks_admission(adm, cnt[C_RUN], pre_len + rest, full_tokens(fb[F_FREE] * block, eng)):
            break
        adm[AD.A_OFFSET] += rest
        _run_head(need, seq, ix, cnt, fb)
        if np.isnan(req[i, R_START]):
            req[i, R_START] = t
        _schedule(i, q, seq, ix, cnt, fb)


@njit(cache=True)
def _admit_ready(seq, ix, cnt, fb, req, caps, eng, t):
    """Admit waiting requests whose KV is already in the cache (E_READY) as decoding sequences,
    head first, while batch slots and KV blocks allow; the decode part then schedules them."""
    preempt = eng[E_PREEMPT] > 0.0
    max_batch = int(eng[E_MAX_BATCH])
    while cnt[C_WAIT] > 0 and cnt[C_RUN] < max_batch:
        i = ix[IX_WQ, 0]
        if seq[SQ_DONE, i] < seq[SQ_PRE, i]:  # a preempted request recomputes: _admit_part's
            break
        if preempt:
            need = kv_blocks(held_tokens(seq[SQ_PROMPT, i], 1.0, caps), eng)
        else:
            need = kv_blocks(max_held_tokens(seq[SQ_PROMPT, i], seq[SQ_OUTPUT, i], caps), eng)
        if need > fb[F_FREE]:
            break
        _run_head(need, seq, ix, cnt, fb)
        req[i, R_START] = t
