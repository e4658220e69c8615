"""Jitted helpers of the serving scheduler (framework/modes/serving/scheduler.py): the waiting
queue, KV blocks, preemption and the three ways a step takes work (decoding sequences, prefill
chunks of running sequences, admissions of waiting ones; ready admissions for a disaggregated
decode pool). They share the scheduler's state: seq[Seq.*, i] and ix[Ix.*, i] per request, cnt,
fb, adm, req (layout.py) and the engine vector eng[Eng.*]. Semantics: scheduler.py's docstring;
reference.py mirrors them."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core.kernel import causal_pairs
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving.layout import (
    Cnt,
    Eng,
    Fb,
    Ix,
    Req,
    Seq,
    State,
)
from decodelab.kernel_layout import Cap
from decodelab.modes.serving.admission import Adm


@njit(cache=True)
def held_tokens(p, g, caps):
    """KV tokens a sequence holds after its prefill and g >= 1 generated tokens."""
    kept = p
    if caps[Cap.PROMPT_CAP] > 0.0 and kept > caps[Cap.PROMPT_CAP]:
        kept = caps[Cap.PROMPT_CAP]
    n = kept + g - 1.0
    if caps[Cap.TOTAL_CAP] > 0.0 and n > caps[Cap.TOTAL_CAP]:
        n = caps[Cap.TOTAL_CAP]
    return n


@njit(cache=True)
def max_held_tokens(p, o, caps):
    """Largest KV a request of prompt p and o output tokens ever holds (the prompt before the
    policy selects, or the final cache)."""
    return max(p, held_tokens(p, o, caps))


@njit(cache=True)
def mem_tokens(n, eng):
    """KV-pool token-equivalents (one token of every layer = 1) of a sequence holding n tokens:
    a sliding-window layer holds the window (Eng.SLIDE_MEM < 0) or Eng.SLIDE_MEM x n (layout.py);
    a held sequence's states in the pool add Eng.STATE_TOKENS."""
    state = eng[Eng.STATE_TOKENS] if n > 0.0 else 0.0
    slide = eng[Eng.SLIDE]
    if slide <= 0.0:
        return n + state
    r = eng[Eng.SLIDE_MEM]
    held = min(n, eng[Eng.WINDOW]) if r < 0.0 else r * n
    return (1.0 - slide) * n + slide * held + state


@njit(cache=True)
def full_tokens(x, eng):
    """Tokens of a full-attention layer that x pool token-equivalents hold (SGLang's reserve counts
    the full-layer pool: model_runner set_num_tokens_hybrid_swa); the window's share is left out."""
    slide = eng[Eng.SLIDE]
    if slide <= 0.0:
        return x
    return x / ((1.0 - slide) + slide * max(eng[Eng.SLIDE_MEM], 0.0))


@njit(cache=True)
def kv_blocks(n, eng):
    """KV blocks a sequence holding n tokens takes from the pool."""
    return np.ceil(mem_tokens(n, eng) / eng[Eng.BLOCK])


@njit(cache=True)
def read_tokens(q, a, eng):
    """KV token-equivalents a sequence's step reads when it adds q tokens and holds a after it: a
    sliding-window layer reads at most its window before each new token, sparse attention's share at
    most its top-k."""
    slide, sparse = eng[Eng.SLIDE], eng[Eng.SPARSE]
    if slide <= 0.0 and sparse <= 0.0:
        return a
    out = (1.0 - slide - sparse) * a + sparse * min(a, eng[Eng.TOPK] + q - 1.0)
    return out + slide * min(a, eng[Eng.WINDOW] + q - 1.0)


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
    full-attention layer, window_pairs for a sliding one and for sparse attention's top-k)."""
    full = causal_pairs(q, a)
    slide, sparse = eng[Eng.SLIDE], eng[Eng.SPARSE]
    if slide <= 0.0 and sparse <= 0.0:
        return full
    out = (1.0 - slide - sparse) * full + sparse * window_pairs(q, a, eng[Eng.TOPK])
    return out + slide * window_pairs(q, a, eng[Eng.WINDOW])


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
    v = ix[Ix.RUN, cnt[Cnt.RUN] - 1]
    fb[Fb.FREE] += seq[Seq.BLOCKS, v]
    seq[Seq.BLOCKS, v] = 0.0
    seq[Seq.DONE, v] = 0.0
    seq[Seq.PRE, v] = seq[Seq.PROMPT, v] + seq[Seq.GEN, v]
    ix[Ix.STATE, v] = State.WAIT
    req[v, Req.PREEMPT] += 1.0
    cnt[Cnt.PREEMPTS] += 1
    cnt[Cnt.WAIT] = _enqueue(ix[Ix.WQ], cnt[Cnt.WAIT], v, seq[Seq.PRE], order)
    cnt[Cnt.RUN] -= 1
    return v


@njit(cache=True)
def _decode_part(seq, ix, cnt, fb, req, caps, eng):
    """Every running sequence past its prefill adds one token, or its k + 1 verified positions
    under in-engine MTP (Eng.SPEC_K = k), budget allowing."""
    preempt = eng[Eng.PREEMPT] > 0.0
    order = int(eng[Eng.ORDER])
    q = 1.0 + max(eng[Eng.SPEC_K], 0.0)
    j = 0
    while j < cnt[Cnt.RUN] and fb[Fb.BUDGET] >= q:
        i = ix[Ix.RUN, j]
        if seq[Seq.DONE, i] >= seq[Seq.PRE, i]:
            if preempt:
                need = (
                    kv_blocks(held_tokens(seq[Seq.PROMPT, i], seq[Seq.GEN, i] + q, caps), eng)
                    - seq[Seq.BLOCKS, i]
                )
                gone = False
                while need > fb[Fb.FREE]:
                    v = _preempt_last(seq, ix, cnt, fb, req, order)
                    if v == i:  # nothing newer to evict: the sequence preempts itself
                        gone = True
                        break
                if gone:
                    break
                if need > 0.0:
                    fb[Fb.FREE] -= need
                    seq[Seq.BLOCKS, i] += need
            ix[Ix.SCHED, cnt[Cnt.SCHED]] = i
            seq[Seq.Q, i] = q
            ix[Ix.IN_STEP, i] = 1
            cnt[Cnt.SCHED] += 1
            fb[Fb.BUDGET] -= q
        j += 1


@njit(cache=True)
def _schedule(i, q, seq, ix, cnt, fb):
    """Put `q` prefill tokens of sequence i into this step (out of the step's token budget)."""
    ix[Ix.SCHED, cnt[Cnt.SCHED]] = i
    seq[Seq.Q, i] = q
    ix[Ix.IN_STEP, i] = 1
    cnt[Cnt.SCHED] += 1
    fb[Fb.BUDGET] -= q
    fb[Fb.PREFILL] += q


@njit(cache=True)
def _prefill_part(seq, ix, cnt, fb, req, eng):
    """Running sequences part-way through their prefill take their next chunk."""
    chunk = eng[Eng.CHUNK]
    preempt = eng[Eng.PREEMPT] > 0.0
    order = int(eng[Eng.ORDER])
    j = 0
    while j < cnt[Cnt.RUN] and fb[Fb.BUDGET] >= 1.0:
        i = ix[Ix.RUN, j]
        rem = seq[Seq.PRE, i] - seq[Seq.DONE, i]
        j += 1
        if rem <= 0.0:
            continue
        q = min(rem, chunk if chunk > 0.0 else rem, fb[Fb.BUDGET])
        if q < rem and chunk <= 0.0:
            continue
        if preempt:
            need = kv_blocks(seq[Seq.DONE, i] + q, eng) - seq[Seq.BLOCKS, i]
            while (
                need > fb[Fb.FREE] and cnt[Cnt.RUN] > j and ix[Ix.IN_STEP, ix[Ix.RUN, cnt[Cnt.RUN] - 1]] == 0
            ):
                _preempt_last(seq, ix, cnt, fb, req, order)
            if need > fb[Fb.FREE]:
                continue
            fb[Fb.FREE] -= need
            seq[Seq.BLOCKS, i] += need
        _schedule(i, q, seq, ix, cnt, fb)


@njit(cache=True)
def _run_head(need, seq, ix, cnt, fb):
    """The head of the waiting queue starts running with `need` KV blocks."""
    i = ix[Ix.WQ, 0]
    fb[Fb.FREE] -= need
    seq[Seq.BLOCKS, i] = need
    for k in range(cnt[Cnt.WAIT] - 1):
        ix[Ix.WQ, k] = ix[Ix.WQ, k + 1]
    cnt[Cnt.WAIT] -= 1
    ix[Ix.STATE, i] = State.RUN
    ix[Ix.RUN, cnt[Cnt.RUN]] = i
    cnt[Cnt.RUN] += 1


@njit(cache=True)
def _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t):
    """Admit waiting requests head first; the first that does not fit (its KV, or the engine's
    admission reserve: admission.py) blocks the rest."""
    block = eng[Eng.BLOCK]
    chunk = eng[Eng.CHUNK]
    preempt = eng[Eng.PREEMPT] > 0.0
    max_batch = int(eng[Eng.MAX_BATCH])
    while cnt[Cnt.WAIT] > 0 and cnt[Cnt.RUN] < max_batch and fb[Fb.BUDGET] >= 1.0:
        i = ix[Ix.WQ, 0]
        pre_len = seq[Seq.PRE, i]
        if seq[Seq.DONE, i] >= pre_len:  # KV already in the cache: _admit_ready's
            break
        q = min(pre_len, chunk if chunk > 0.0 else pre_len, fb[Fb.BUDGET])
        if chunk <= 0.0 and q < pre_len:
            break
        if preempt:
            need = kv_blocks(q, eng)
        else:
            need = kv_blocks(max_held_tokens(seq[Seq.PROMPT, i], seq[Seq.OUTPUT, i], caps), eng)
        if need > fb[Fb.FREE]:
            break
        rest = AD.left(seq[Seq.OUTPUT, i], seq[Seq.GEN, i], adm[Adm.CLIP])
        if AD.blocks_admission(adm, cnt[Cnt.RUN], pre_len + rest, full_tokens(fb[Fb.FREE] * block, eng)):
            break
        adm[Adm.OFFSET] += rest
        _run_head(need, seq, ix, cnt, fb)
        if np.isnan(req[i, Req.START]):
            req[i, Req.START] = t
        _schedule(i, q, seq, ix, cnt, fb)


@njit(cache=True)
def _admit_ready(seq, ix, cnt, fb, req, caps, eng, t):
    """Admit waiting requests whose KV is already in the cache (Eng.READY) as decoding sequences,
    head first, while batch slots and KV blocks allow; the decode part then schedules them."""
    preempt = eng[Eng.PREEMPT] > 0.0
    max_batch = int(eng[Eng.MAX_BATCH])
    while cnt[Cnt.WAIT] > 0 and cnt[Cnt.RUN] < max_batch:
        i = ix[Ix.WQ, 0]
        if seq[Seq.DONE, i] < seq[Seq.PRE, i]:  # a preempted request recomputes: _admit_part's
            break
        if preempt:
            need = kv_blocks(held_tokens(seq[Seq.PROMPT, i], 1.0, caps), eng)
        else:
            need = kv_blocks(max_held_tokens(seq[Seq.PROMPT, i], seq[Seq.OUTPUT, i], caps), eng)
        if need > fb[Fb.FREE]:
            break
        _run_head(need, seq, ix, cnt, fb)
        req[i, Req.START] = t
