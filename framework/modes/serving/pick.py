"""One step of the serving scheduler (framework/modes/serving/scheduler.py), jitted: which
sequences it runs (`pick_step`), the aggregates its cost is computed from (`step_aggregates`) and
the running list after it (`compact_running`). Semantics: scheduler.py's docstring."""

from __future__ import annotations

from numba import njit

from decodelab.core.kernel import attended_tokens, causal_pairs
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving.layout import (
    C_PREEMPTS,
    C_RUN,
    C_SCHED,
    C_WAIT,
    F_BUDGET,
    F_PREFILL,
    ST_RUN,
)
from decodelab.modes.serving.parts import (
    _admit_part,
    _admit_ready,
    _blocks,
    _decode_part,
    _prefill_part,
    held_tokens,
)

# step_aggregates' output: the step's token, sampled-token, KV-read and pair sums, the prefilling
# sequences' share of them, and the batch the step runs at (padded to a graph bucket)
G_TOKENS, G_SAMPLED, G_KV, G_PAIRS, G_PRE_TOK, G_PRE_KV, G_PRE_PAIRS, G_PADDED = range(8)
N_AGG = 8


@njit(cache=True)
def pick_step(
    run,
    wq,
    sched,
    q_of,
    in_step,
    cnt,
    fb,
    blocks,
    done_tok,
    pre_len,
    prompt,
    output,
    gen,
    adm,
    state,
    req,
    caps,
    block,
    chunk,
    preempt,
    order,
    mixed,
    ready,
    max_batch,
    max_tok,
    t,
):
    """Choose the step's sequences into sched[:cnt[C_SCHED]] (decoding ones first); returns how
    many of them decode."""
    cnt[C_SCHED] = 0
    fb[F_BUDGET] = max_tok
    fb[F_PREFILL] = 0.0
    preempts = cnt[C_PREEMPTS]
    if ready:
        _admit_ready(
            run,
            wq,
            cnt,
            fb,
            blocks,
            done_tok,
            pre_len,
            prompt,
            output,
            state,
            req,
            caps,
            block,
            preempt,
            max_batch,
            t,
        )
    AD.start_step(adm, run, cnt[C_RUN], output, gen)
    if mixed:
        _decode_part(
            run,
            wq,
            sched,
            q_of,
            in_step,
            cnt,
            fb,
            blocks,
            done_tok,
            pre_len,
            prompt,
            gen,
            state,
            req,
            caps,
            block,
            preempt,
            order,
        )
    n_dec = cnt[C_SCHED]
    _prefill_part(
        run,
        wq,
        sched,
        q_of,
        in_step,
        cnt,
        fb,
        blocks,
        done_tok,
        pre_len,
        prompt,
        gen,
        state,
        req,
        block,
        chunk,
        preempt,
        order,
    )
    _admit_part(
        run,
        wq,
        sched,
        q_of,
        in_step,
        cnt,
        fb,
        blocks,
        done_tok,
        pre_len,
        prompt,
        output,
        gen,
        adm,
        state,
        req,
        caps,
        block,
        chunk,
        preempt,
        max_batch,
        t,
    )
    if (
        mixed
        and chunk <= 0.0
        and n_dec > 0
        and cnt[C_SCHED] == n_dec
        and cnt[C_WAIT] > 0
        and cnt[C_RUN] < max_batch
        and fb[F_BUDGET] < pre_len[wq[0]] <= max_tok
    ):  # whole prompts: the head fits the budget, not next to the decodes -> context-only step
        for s in range(n_dec):
            in_step[sched[s]] = False
        cnt[C_SCHED] = 0
        fb[F_BUDGET] = max_tok
        _admit_part(
            run,
            wq,
            sched,
            q_of,
            in_step,
            cnt,
            fb,
            blocks,
            done_tok,
            pre_len,
            prompt,
            output,
            gen,
            adm,
            state,
            req,
            caps,
            block,
            chunk,
            preempt,
            max_batch,
            t,
        )
        n_dec = 0
        if cnt[C_SCHED] == 0:  # KV memory holds it back: the decode step after all
            fb[F_BUDGET] = max_tok
            _decode_part(
                run,
                wq,
                sched,
                q_of,
                in_step,
                cnt,
                fb,
                blocks,
                done_tok,
                pre_len,
                prompt,
                gen,
                state,
                req,
                caps,
                block,
                preempt,
                order,
            )
            n_dec = cnt[C_SCHED]
    if not mixed and cnt[C_SCHED] == 0:  # separate steps: decode when no prefill work
        _decode_part(
            run,
            wq,
            sched,
            q_of,
            in_step,
            cnt,
            fb,
            blocks,
            done_tok,
            pre_len,
            prompt,
            gen,
            state,
            req,
            caps,
            block,
            preempt,
            order,
        )
        n_dec = cnt[C_SCHED]
    n_sched = cnt[C_SCHED]
    for s in range(n_sched):
        in_step[sched[s]] = False
    AD.end_step(adm, n_dec > 0, cnt[C_PREEMPTS] > preempts, run, cnt[C_RUN], output, gen)
    return n_dec


@njit(cache=True)
def step_aggregates(sched, n_sched, n_dec, q_of, prompt, gen, done_tok, pre_len, caps, buckets, agg):
    """The step's aggregates into agg[G_*] (a decode-only step padded to its graph bucket)."""
    tokens = 0.0
    sampled = 0.0
    kv_read = 0.0
    pairs = 0.0
    pre_tok = 0.0  # the prefill sequences' share (their op path)
    pre_kv = 0.0
    pre_pairs = 0.0
    for s in range(n_sched):
        i = sched[s]
        q = q_of[i]
        if s < n_dec:
            a = attended_tokens(prompt[i], prompt[i] + gen[i], caps)
            sampled += q
        else:
            a = done_tok[i] + q
            if a >= pre_len[i]:  # the chunk that ends the prefill emits a token
                sampled += 1.0
            pre_tok += q
            pre_kv += a
            pre_pairs += causal_pairs(q, a)
        tokens += q
        kv_read += a
        pairs += causal_pairs(q, a)
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
    agg[G_TOKENS] = tokens
    agg[G_SAMPLED] = sampled
    agg[G_KV] = kv_read
    agg[G_PAIRS] = pairs
    agg[G_PRE_TOK] = pre_tok
    agg[G_PRE_KV] = pre_kv
    agg[G_PRE_PAIRS] = pre_pairs
    agg[G_PADDED] = padded


@njit(cache=True)
def compact_running(run, cnt, state, done_tok, pre_len, prompt, gen, caps, block):
    """Drop finished sequences from run[]; returns the KV blocks the running ones hold."""
    k = 0
    kv = 0.0
    for j in range(cnt[C_RUN]):
        i = run[j]
        if state[i] == ST_RUN:
            run[k] = i
            k += 1
            if done_tok[i] < pre_len[i]:
                kv += _blocks(done_tok[i], block)
            else:
                kv += _blocks(held_tokens(prompt[i], gen[i], caps), block)
    cnt[C_RUN] = k
    return kv
