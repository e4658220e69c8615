"""One step of the serving scheduler (framework/modes/serving/scheduler.py), jitted: which
sequences it runs (`pick_step`), the aggregates its cost is computed from (`step_aggregates`) and
the running list after it (`compact_running`). Semantics: scheduler.py's docstring."""

from __future__ import annotations

from numba import njit

from decodelab.core.kernel import attended_tokens
from decodelab.kernel_layout import Layout
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving import recv as RV
from decodelab.modes.serving.layout import (
    Cnt,
    Eng,
    Fb,
    Ix,
    Seq,
    State,
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
# LAUNCH: the host's seconds to prepare and launch the step (engine loop work + eager dispatch; stepcost.step_time)
Agg = Layout(
    "Agg", "TOKENS", "SAMPLED", "KV", "PAIRS", "PRE_TOK", "PRE_KV", "PRE_PAIRS", "PADDED", "EMIT", "LAUNCH"
)


@njit(cache=True)
def pick_step(seq, ix, cnt, fb, adm, req, caps, eng, t):
    """Choose the step's sequences into ix[Ix.SCHED, :cnt[Cnt.SCHED]] (decoding ones first);
    returns how many of them decode."""
    max_tok = eng[Eng.MAX_TOKENS]
    mixed = eng[Eng.MIXED] > 0.0
    chunk = eng[Eng.CHUNK]
    cnt[Cnt.SCHED] = 0
    fb[Fb.BUDGET] = max_tok
    fb[Fb.PREFILL] = 0.0
    preempts = cnt[Cnt.PREEMPTS]
    if eng[Eng.READY] > 0.0:
        _admit_ready(seq, ix, cnt, fb, req, caps, eng, t)
    AD.start_step(adm, ix[Ix.RUN], cnt[Cnt.RUN], seq[Seq.OUTPUT], seq[Seq.GEN])
    if mixed:
        _decode_part(seq, ix, cnt, fb, req, caps, eng)
    n_dec = cnt[Cnt.SCHED]
    _prefill_part(seq, ix, cnt, fb, req, eng)
    _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t)
    if (
        mixed
        and chunk <= 0.0
        and n_dec > 0
        and cnt[Cnt.SCHED] == n_dec
        and cnt[Cnt.WAIT] > 0
        and cnt[Cnt.RUN] < int(eng[Eng.MAX_BATCH])
        and fb[Fb.BUDGET] < seq[Seq.PRE, ix[Ix.WQ, 0]] <= max_tok
    ):  # whole prompts: the head fits the budget, not next to the decodes -> context-only step
        for s in range(n_dec):
            ix[Ix.IN_STEP, ix[Ix.SCHED, s]] = 0
        cnt[Cnt.SCHED] = 0
        fb[Fb.BUDGET] = max_tok
        _admit_part(seq, ix, cnt, fb, adm, req, caps, eng, t)
        n_dec = 0
        if cnt[Cnt.SCHED] == 0:  # KV memory holds it back: the decode step after all
            fb[Fb.BUDGET] = max_tok
            _decode_part(seq, ix, cnt, fb, req, caps, eng)
            n_dec = cnt[Cnt.SCHED]
    if not mixed and cnt[Cnt.SCHED] == 0:  # separate steps: decode when no prefill work
        _decode_part(seq, ix, cnt, fb, req, caps, eng)
        n_dec = cnt[Cnt.SCHED]
    n_sched = cnt[Cnt.SCHED]
    for s in range(n_sched):
        ix[Ix.IN_STEP, ix[Ix.SCHED, s]] = 0
    if 0 < n_dec < n_sched and RV.batch_held(fb, eng, wait_tokens(seq, ix, n_dec, n_sched)):
        cnt[Cnt.SCHED] = n_dec  # the prompts stay running, their prefill for a later step
        fb[Fb.PREFILL] = 0.0
    AD.end_step(
        adm, n_dec > 0, cnt[Cnt.PREEMPTS] > preempts, ix[Ix.RUN], cnt[Cnt.RUN], seq[Seq.OUTPUT], seq[Seq.GEN]
    )
    return n_dec


@njit(cache=True)
def wait_tokens(seq, ix, n_dec, n_sched) -> float:
    """The tokens batch waiting counts in a step (recv.py batch_held): each prefilling sequence's
    whole prompt (or recompute), each decoding one's tokens (1 + its MTP draft)."""
    tokens = 0.0
    for s in range(n_sched):
        i = ix[Ix.SCHED, s]
        tokens += seq[Seq.Q, i] if s < n_dec else seq[Seq.PRE, i]
    return tokens


@njit(cache=True)
def step_aggregates(seq, ix, n_sched, n_dec, caps, eng, buckets, agg):
    """The step's aggregates into agg[Agg.*] (a decode-only step padded to its graph bucket); KV
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
        i = ix[Ix.SCHED, s]
        q = seq[Seq.Q, i]
        if s < n_dec:  # q - 1 > 0: MTP draft positions verified after the last token
            a = attended_tokens(seq[Seq.PROMPT, i], seq[Seq.PROMPT, i] + seq[Seq.GEN, i] + q - 1.0, caps)
            sampled += q
            emit += 1.0
        else:
            a = seq[Seq.DONE, i] + q
            if a >= seq[Seq.PRE, i]:  # the chunk that ends the prefill emits a token
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
    agg[Agg.EMIT] = emit
    agg[Agg.TOKENS] = tokens
    agg[Agg.SAMPLED] = sampled
    agg[Agg.KV] = kv_read
    agg[Agg.PAIRS] = pairs
    agg[Agg.PRE_TOK] = pre_tok
    agg[Agg.PRE_KV] = pre_kv
    agg[Agg.PRE_PAIRS] = pre_pairs
    agg[Agg.PADDED] = padded


@njit(cache=True)
def compact_running(seq, ix, cnt, caps, eng):
    """Drop finished sequences from the running list; returns the KV blocks the running ones hold."""
    k = 0
    kv = 0.0
    for j in range(cnt[Cnt.RUN]):
        i = ix[Ix.RUN, j]
        if ix[Ix.STATE, i] == State.RUN:
            ix[Ix.RUN, k] = i
            k += 1
            if seq[Seq.DONE, i] < seq[Seq.PRE, i]:
                kv += kv_blocks(seq[Seq.DONE, i], eng)
            else:
                kv += kv_blocks(held_tokens(seq[Seq.PROMPT, i], seq[Seq.GEN, i], caps), eng)
    cnt[Cnt.RUN] = k
    return kv
