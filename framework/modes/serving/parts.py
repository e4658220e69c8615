"""Jitted helpers of the serving scheduler (framework/modes/serving/scheduler.py): the waiting
queue, KV blocks, preemption and the three ways a step takes work (decoding sequences, prefill
chunks of running sequences, admissions of waiting ones; ready admissions for a disaggregated
decode pool). Semantics: scheduler.py's docstring; reference.py mirrors them."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core.kernel import P_PROMPT_CAP, P_TOTAL_CAP
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving.layout import (
    C_PREEMPTS,
    C_RUN,
    C_SCHED,
    C_WAIT,
    F_BUDGET,
    F_FREE,
    F_PREFILL,
    R_PREEMPT,
    R_START,
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
def _blocks(tokens, block):
    return np.ceil(tokens / block)


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
def _preempt_last(run, wq, cnt, fb, blocks, done_tok, pre_len, prompt, gen, state, req, order):
    """Preempt the newest running sequence: free its KV; it recomputes prompt + generated."""
    v = run[cnt[C_RUN] - 1]
    fb[F_FREE] += blocks[v]
    blocks[v] = 0.0
    done_tok[v] = 0.0
    pre_len[v] = prompt[v] + gen[v]
    state[v] = ST_WAIT
    req[v, R_PREEMPT] += 1.0
    cnt[C_PREEMPTS] += 1
    cnt[C_WAIT] = _enqueue(wq, cnt[C_WAIT], v, pre_len, order)
    cnt[C_RUN] -= 1
    return v


@njit(cache=True)
def _decode_part(
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
):
    """Every running sequence past its prefill adds one token (budget allowing)."""
    j = 0
    while j < cnt[C_RUN] and fb[F_BUDGET] >= 1.0:
        i = run[j]
        if done_tok[i] >= pre_len[i]:
            if preempt:
                need = _blocks(held_tokens(prompt[i], gen[i] + 1.0, caps), block) - blocks[i]
                gone = False
                while need > fb[F_FREE]:
                    v = _preempt_last(
                        run, wq, cnt, fb, blocks, done_tok, pre_len, prompt, gen, state, req, order
                    )
                    if v == i:  # nothing newer to evict: the sequence preempts itself
                        gone = True
                        break
                if gone:
                    break
                if need > 0.0:
                    fb[F_FREE] -= need
                    blocks[i] += need
            sched[cnt[C_SCHED]] = i
            q_of[i] = 1.0
            in_step[i] = True
            cnt[C_SCHED] += 1
            fb[F_BUDGET] -= 1.0
        j += 1


@njit(cache=True)
def _schedule(i, q, sched, q_of, in_step, cnt, fb):
    """Put `q` prefill tokens of sequence i into this step (out of the step's token budget)."""
    sched[cnt[C_SCHED]] = i
    q_of[i] = q
    in_step[i] = True
    cnt[C_SCHED] += 1
    fb[F_BUDGET] -= q
    fb[F_PREFILL] += q


@njit(cache=True)
def _prefill_part(
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
):
    """Running sequences part-way through their prefill take their next chunk."""
    j = 0
    while j < cnt[C_RUN] and fb[F_BUDGET] >= 1.0:
        i = run[j]
        rem = pre_len[i] - done_tok[i]
        j += 1
        if rem <= 0.0:
            continue
        q = min(rem, chunk if chunk > 0.0 else rem, fb[F_BUDGET])
        if q < rem and chunk <= 0.0:
            continue
        if preempt:
            need = _blocks(done_tok[i] + q, block) - blocks[i]
            while need > fb[F_FREE] and cnt[C_RUN] > j and not in_step[run[cnt[C_RUN] - 1]]:
                _preempt_last(run, wq, cnt, fb, blocks, done_tok, pre_len, prompt, gen, state, req, order)
            if need > fb[F_FREE]:
                continue
            fb[F_FREE] -= need
            blocks[i] += need
        _schedule(i, q, sched, q_of, in_step, cnt, fb)


@njit(cache=True)
def _admit_part(
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
):
    """Admit waiting requests head first; the first that does not fit (its KV, or the engine's
    admission reserve: admission.py) blocks the rest."""
    while cnt[C_WAIT] > 0 and cnt[C_RUN] < max_batch and fb[F_BUDGET] >= 1.0:
        i = wq[0]
        if done_tok[i] >= pre_len[i]:  # KV already in the cache: _admit_ready's
            break
        q = min(pre_len[i], chunk if chunk > 0.0 else pre_len[i], fb[F_BUDGET])
        if chunk <= 0.0 and q < pre_len[i]:
            break
        if preempt:
            need = _blocks(q, block)
        else:
            need = _blocks(max_held_tokens(prompt[i], output[i], caps), block)
        if need > fb[F_FREE]:
            break
        rest = AD.left(output[i], gen[i], adm[AD.A_CLIP])
        if AD.blocks_admission(adm, cnt[C_RUN], pre_len[i] + rest, fb[F_FREE] * block):
            break
        adm[AD.A_OFFSET] += rest
        fb[F_FREE] -= need
        blocks[i] = need
        for k in range(cnt[C_WAIT] - 1):
            wq[k] = wq[k + 1]
        cnt[C_WAIT] -= 1
        state[i] = ST_RUN
        run[cnt[C_RUN]] = i
        cnt[C_RUN] += 1
        if np.isnan(req[i, R_START]):
            req[i, R_START] = t
        _schedule(i, q, sched, q_of, in_step, cnt, fb)


@njit(cache=True)
def _admit_ready(
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
):
    """Admit waiting requests whose KV is already in the cache (E_READY) as decoding sequences,
    head first, while batch slots and KV blocks allow; the decode part then schedules them."""
    while cnt[C_WAIT] > 0 and cnt[C_RUN] < max_batch:
        i = wq[0]
        if done_tok[i] < pre_len[i]:  # a preempted request recomputes: _admit_part's
            break
        if preempt:
            need = _blocks(held_tokens(prompt[i], 1.0, caps), block)
        else:
            need = _blocks(max_held_tokens(prompt[i], output[i], caps), block)
        if need > fb[F_FREE]:
            break
        fb[F_FREE] -= need
        blocks[i] = need
        for k in range(cnt[C_WAIT] - 1):
            wq[k] = wq[k + 1]
        cnt[C_WAIT] -= 1
        state[i] = ST_RUN
        run[cnt[C_RUN]] = i
        cnt[C_RUN] += 1
        req[i, R_START] = t
