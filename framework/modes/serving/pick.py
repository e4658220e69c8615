"""One step of the serving scheduler (framework/modes/serving/scheduler.py), jitted: which
sequences it runs (`pick_step`), the aggregates its cost is computed from (`step_aggregates`) and
the running list after it (`compact_running`). Semantics: scheduler.py's docstring."""

from __future__ import annotations

from numba import njit

from decodelab.core.kernel import attended_tokens
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving.layout import (
    C_PREEMPTS,
    C_RUN,
    C_SCHED,
    C_WAIT,
    E_CHUNK,
    E_MAX_BATCH,
    E_MAX_TOKENS,
    E_MIXED,
    E_READY,
    F_BUDGET,
    F_PREFILL,
    IX_IN_STEP,
    IX_RUN,
    IX_SCHED,
    IX_STATE,
    IX_WQ,
    SQ_DONE,
    SQ_GEN,
    SQ_OUTPUT,
    SQ_PRE,
    SQ_PROMPT,
    SQ_Q,
    ST_RUN,
)
from decodelab.modes.serving.parts import (
    _admit_part,
    _admit_ready,
    _decode_part,
    _prefill_part,
    held_tokens,
    kv_blocks,
    layer_pairs,
    read_tokens,
)

# step_aggregates' output: the step's token, sampled-token, KV-read and pair sums, the prefilling
# sequences' share of them, the batch the step runs at (padded to a graph bucket) and the sequences
# that emit a token in it (an MTP draft runs on those: modes/serving/stepcost.py)
G_TOKENS, G_SAMPLED, G_KV, G_PAIRS, G_PRE_TOK, G_PRE_KV, G_PRE_PAIRS, G_PADDED, G_EMIT = range(9)
N_AGG = 9


@njit(cache=True)
def pick_step(seq, ix, cnt, fb, adm, req, caps, eng, t):
    """Choose the step's sequences into ix[IX_SCHED, :cnt[C_SCHED]] (decoding ones first);
    returns how many of them decode."""
    max_tok = eng[E_MAX_TOKENS]
    mixed = eng[E_MIXED] > 0.0
    chunk = eng[E_CHUNK]
    cnt[C_SCHED] = 0
    fb[F_BUDGET] = max_tok
    fb[F_PREFILL] = 0.0
    preempts = cnt[C_PREEMPTS]
    if eng[E_READY] > 0.0:
        _admit_ready(seq, ix, cnt, fb, req, caps, eng, t)
    AD.start_step(adm, ix[IX_RUN], cnt[C_RUN], seq[SQ_OUTPUT], seq[SQ_GEN])
    if mixed:
        _decode_part(seq, ix, cnt, fb, req, caps, eng)
    n_dec = cnt[C_SCHED]
    _prefill_part(seq, ix, cnt, fb, req, eng)
    _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t)
    if (
        mixed
        and chunk <= 0.0
        and n_dec > 0
        and cnt[C_SCHED] == n_dec
        and cnt[C_WAIT] > 0
        and cnt[C_RUN] < int(eng[E_MAX_BATCH])
        and fb[F_BUDGET] < seq[SQ_PRE, ix[IX_WQ, 0]] <= max_tok
    ):  # whole prompts: the head fits the budget, not next to the decodes -> context-only step
        for s in range(n_dec):
            ix[IX_IN_STEP, ix[IX_SCHED, s]] = 0
        cnt[C_SCHED] = 0
        fb[F_BUDGET] = max_tok
        _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t)
        n_dec = 0
        if cnt[C_SCHED] == 0:  # KV memory holds it back: the decode step after all
            fb[F_BUDGET] = max_tok
            _decode_part(seq, ix, cnt, fb, req, caps, eng)
            n_dec = cnt[C_SCHED]
    if not mixed and cnt[C_SCHED] == 0:  # separate steps: decode when no prefill work
        _decode_part(seq, ix, cnt, fb, req, caps, eng)
        n_dec = cnt[C_SCHED]
    n_sched = cnt[C_SCHED]
    for s in range(n_sched):
        ix[IX_IN_STEP, ix[IX_SCHED, s]] = 0
    AD.end_step(
        adm, n_dec > 0, cnt[C_PREEMPTS] > preempts, ix[IX_RUN], cnt[C_RUN], seq[SQ_OUTPUT], seq[SQ_GEN]
    )
    return n_dec


@njit(cache=True)
def step_aggregates(seq, ix, n_sched, n_dec, caps, eng, buckets, agg):
    """The step's aggregates into agg[G_*] (a decode-only step padded to its graph bucket); KV
    read and pairs layer-averaged over full and sliding-window layers (parts.read_tokens,
    parts.layer_pairs)."""
    tokens = 0.0
    sampled = 0.0
    kv_read = 0.0
    pairs = 0.0
    pre_tok = 0.0  # the prefill sequences' share (their op path)
    pre_kv = 0.0
    pre_pairs = 0.0
    emit = 0.0
    for s in range(n_sched):
        i = ix[IX_SCHED, s]
        q = seq[SQ_Q, i]
        if s < n_dec:  # q - 1 > 0: MTP draft positions verified after the last token
            a = attended_tokens(seq[SQ_PROMPT, i], seq[SQ_PROMPT, i] + seq[SQ_GEN, i] + q - 1.0, caps)
            sampled += q
            emit += 1.0
        else:
            a = seq[SQ_DONE, i] + q
            if a >= seq[SQ_PRE, i]:  # the chunk that ends the prefill emits a token
                sampled += 1.0
                emit += 1.0
            pre_tok += q
            pre_kv += read_tokens(q, a, eng)
            pre_pairs += layer_pairs(q, a, eng)
        tokens += q
        kv_read += read_tokens(q, a, eng)
        pairs += layer_pairs(q, a, eng)
    padded = float(n_sched)
    if n_dec == n_sched and buckets.shape[0] > 0:
        for b in range(buckets.shape[0]):
            if buckets[b] >= n_sched:
                padded = buckets[b]
                break
        scale = padded / n_sched
        tokens *= scale
        sampled *= scale
        kv_read *= scale
        pairs *= scale
        emit *= scale
    agg[G_EMIT] = emit
    agg[G_TOKENS] = tokens
    agg[G_SAMPLED] = sampled
    agg[G_KV] = kv_read
    agg[G_PAIRS] = pairs
    agg[G_PRE_TOK] = pre_tok
    agg[G_PRE_KV] = pre_kv
    agg[G_PRE_PAIRS] = pre_pairs
    agg[G_PADDED] = padded


@njit(cache=True)
def compact_running(seq, ix, cnt, caps, eng):
    """Drop finished sequences from the running list; returns the KV blocks the running ones hold."""
    k = 0
    kv = 0.0
    for j in range(cnt[C_RUN]):
        i = ix[IX_RUN, j]
        if ix[IX_STATE, i] == ST_RUN:
            ix[IX_RUN, k] = i
            k += 1
            if seq[SQ_DONE, i] < seq[SQ_PRE, i]:
                kv += kv_blocks(seq[SQ_DONE, i], eng)
            else:
                kv += kv_blocks(held_tokens(seq[SQ_PROMPT, i], seq[SQ_GEN, i], caps), eng)
    cnt[C_RUN] = k
    return kv
