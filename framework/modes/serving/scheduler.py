"""Numba scheduler of a serving engine: request-level continuous batching over plain arrays.

Each engine step is one fused forward the way real engines run it: the scheduler picks the
step's sequences (decode sequences add one token, prefilling sequences add a chunk of their
prompt), and the step costs ONE pass of the token GEMMs over all the step's tokens plus each
sequence's own attention (the KV tokens it reads, its causal query-key pairs): `kernel.step_core`
over the step's aggregates. Semantics (framework/modes/serving/reference.py is the pure-Python mirror):

- arrivals enter a waiting queue ordered by `order` (fcfs: arrival order; sjf: shortest prefill
  first); closed loop: a finished request's client issues the next request think[k] s later;
- a step schedules, in order: decoding sequences (1 token each), sequences part-way through their
  prefill (a chunk each), then admits waiting requests head first while `max_batch` sequences,
  the token budget `max_tokens` and KV memory allow (the first that does not fit blocks the rest);
  chunk 0 = a prompt is prefilled whole, so it must fit the step's remaining budget; when the
  head of the queue fits the budget but not next to the step's decode tokens (and no other
  prefill is in the step), the step becomes a context-only step: a prompt up to
  `max_tokens` is never starved behind decodes;
- mixed = 0: prefill and decode are separate steps (prefill first when there is prefill work);
- KV memory in blocks of `block` tokens; queue mode reserves a request's largest KV at admission
  and never evicts; preempt mode allocates blocks as sequences grow and, when none is free,
  preempts the newest running sequence, which later recomputes its prompt + generated tokens;
- a decode-only step runs at the smallest compiled batch bucket >= its sequences (static
  graphs; every per-sequence term scaled to the padded batch) and with `call_cost` (e.g. CUDA
  graphs); a step with prefill work runs with `call_cost_mixed`;
- host work of the engine loop per step: host_iter + host_req x sequences (the caller passes
  `hw` with its per-step host cost moved into E_HOST_ITER). Without overlap the step lasts its
  GPU time + host work; with an overlap scheduler only max(0, host work - GPU time) is exposed.
- ready (E_READY, disaggregated decode pools: framework/modes/serving/disagg.py): every request
  arrives with its prompt's KV already in the cache (moved from a prefill instance), so it is
  admitted as a decoding sequence (KV, batch slot; no token budget) before the step's work is
  picked, and its first decode step attends the prompt and emits its first token (vLLM's
  NixlConnector: the decode instance computes the last prompt position); a preempted one
  recomputes like any request.
The KV policy is the caller's caps (kernel.P_*): a decode step attends attended_tokens(prompt,
prompt + generated, caps); a sequence holds min(min(p, prompt_cap) + g - 1, total_cap) tokens after
its prefill and g generated tokens (the newest token's KV is written by the next step).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.modes.serving import admission as AD
from decodelab.core.kernel import (
    K_HOST,
    N_ACC,
    P_PROMPT_CAP,
    P_TOTAL_CAP,
    attended_tokens,
    causal_pairs,
    step_core,
)

(
    E_MAX_BATCH,
    E_MAX_TOKENS,
    E_CHUNK,
    E_ORDER,
    E_MIXED,
    E_PREEMPT,
    E_CAP_BLOCKS,
    E_BLOCK,
    E_CLOSED,
    E_OVERLAP,
    E_HOST_ITER,
    E_HOST_REQ,
    E_LOOKAHEAD,
    E_ADMIT_RATIO,
    E_ADMIT_MIN,
    E_ADMIT_DECAY,
    E_ADMIT_CLIP,
    E_ADMIT_RETRACT,
    E_READY,
) = range(19)
N_ENG = 19
ORDERS = ("fcfs", "sjf")

(R_ARRIVAL, R_PROMPT, R_OUTPUT, R_START, R_FIRST, R_DONE, R_PREEMPT, R_MAX_ITL, R_FIRST_STEP, R_DONE_STEP) = (
    range(10)
)
N_REQ = 10
T_START, T_DUR = 0, 1
T_CAUSE = 2  # 7 causes (kernel.CAUSES) in columns 2..8
(T_SEQS, T_PADDED, T_TOKENS, T_PREFILL, T_DECODE, T_KV, T_RESERVED, T_WAIT, T_MIXED) = range(9, 18)
N_STEP = 18
ST_NEW, ST_WAIT, ST_RUN, ST_DONE = 0, 1, 2, 3


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


# Scheduler state shared by the helpers below: cnt = [n_sched, n_run, n_wait, preemptions],
# fb = [free blocks, token budget left, prefill tokens in the step]; adm: admission.A_*.
C_SCHED, C_RUN, C_WAIT, C_PREEMPTS = range(4)
F_FREE, F_BUDGET, F_PREFILL = range(3)


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


@njit(cache=True)
def serve(
    op_call,
    op_w,
    op_lin,
    call_rep,
    call_cost,
    call_cost_mixed,
    tier_bw,
    kv_frac,
    hw,
    caps,
    eng,
    buckets,
    arrival_in,
    prompt,
    output,
    think,
):
    """Simulate the requests (arrival NaN: issued later by a closed-loop client, `think[k]` s
    after a request ends); returns (req[n, N_REQ], steps[m, N_STEP], status) with status 0 =
    all served, 1 = stuck (a request can never be scheduled: the caller checks beforehand)."""
    n = prompt.shape[0]
    arrival = arrival_in.copy()
    max_batch = int(eng[E_MAX_BATCH])
    max_tok = eng[E_MAX_TOKENS]
    chunk = eng[E_CHUNK]
    order = int(eng[E_ORDER])
    mixed = eng[E_MIXED] > 0.0
    preempt = eng[E_PREEMPT] > 0.0
    cap_blocks = eng[E_CAP_BLOCKS]
    block = eng[E_BLOCK]
    closed = eng[E_CLOSED] > 0.0
    overlap = eng[E_OVERLAP] > 0.0
    host_iter = eng[E_HOST_ITER]
    host_req = eng[E_HOST_REQ]
    lookahead = eng[E_LOOKAHEAD] > 0.0
    ready = eng[E_READY] > 0.0
    in_flight = False  # a step runs on the GPU while the next one is scheduled (lookahead)
    n_calls = call_rep.shape[0]
    acc_bytes = np.zeros((n_calls, tier_bw.shape[0]))
    acc_flops = np.zeros((n_calls, N_ACC))
    acc_link = np.zeros((n_calls, 2))
    row = np.zeros(7)

    req = np.full((n, N_REQ), np.nan)
    req[:, R_PROMPT] = prompt
    req[:, R_OUTPUT] = output
    req[:, R_PREEMPT] = 0.0
    req[:, R_MAX_ITL] = 0.0
    state = np.zeros(n, np.int64)
    done_tok = np.zeros(n)
    pre_len = prompt.copy()
    gen = np.zeros(n)
    blocks = np.zeros(n)
    last_tok = np.zeros(n)
    if ready:  # the prompt's KV arrives with the request (a disaggregated decode pool)
        done_tok[:] = prompt
    wq = np.empty(n, np.int64)
    run = np.empty(n, np.int64)
    sched = np.empty(n, np.int64)
    q_of = np.zeros(n)
    in_step = np.zeros(n, np.bool_)
    cnt = np.zeros(4, np.int64)
    fb = np.zeros(3)
    fb[F_FREE] = cap_blocks
    adm = np.zeros(AD.N_ADM)
    adm[AD.A_ON] = 1.0 if eng[E_ADMIT_RATIO] > 0.0 else 0.0
    adm[AD.A_INIT] = eng[E_ADMIT_RATIO]
    adm[AD.A_RATIO] = eng[E_ADMIT_RATIO]
    adm[AD.A_MIN] = eng[E_ADMIT_MIN]
    adm[AD.A_DECAY] = eng[E_ADMIT_DECAY]
    adm[AD.A_CLIP] = eng[E_ADMIT_CLIP]
    adm[AD.A_RETRACT] = eng[E_ADMIT_RETRACT]
    next_arr = 0
    issued = n
    if closed:
        issued = 0
        while issued < n and not np.isnan(arrival[issued]):
            issued += 1

    steps = np.zeros((4096, N_STEP))  # grows by doubling
    n_steps = 0
    n_done = 0
    t = 0.0
    status = 0
    while n_done < n:
        cut = t  # requests that arrived by now are seen by the scheduler
        if lookahead and in_flight:  # this step was scheduled when the previous one started
            cut = steps[n_steps - 1, T_START]
        while next_arr < n and not np.isnan(arrival[next_arr]) and arrival[next_arr] <= cut:
            state[next_arr] = ST_WAIT
            req[next_arr, R_ARRIVAL] = arrival[next_arr]
            cnt[C_WAIT] = _enqueue(wq, cnt[C_WAIT], next_arr, pre_len, order)
            next_arr += 1
        if cnt[C_RUN] == 0 and cnt[C_WAIT] == 0:
            if in_flight:  # an idle engine schedules as soon as its last step ends
                in_flight = False
                continue
            AD.idle(adm)
            if next_arr < n and not np.isnan(arrival[next_arr]):
                t = arrival[next_arr]
                continue
            status = 1
            break

        # ---- pick the step's work
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

        if n_sched == 0:  # nothing fits now: wait for the next arrival, else stuck
            if in_flight:
                in_flight = False
                continue
            AD.idle(adm)
            if next_arr < n and not np.isnan(arrival[next_arr]) and cnt[C_RUN] == 0:
                t = max(t, arrival[next_arr])
                continue
            status = 1
            break

        # ---- the fused step's aggregates and cost
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
        cc = call_cost if n_dec == n_sched else call_cost_mixed
        step_core(
            op_call,
            op_w,
            op_lin,
            call_rep,
            cc,
            tier_bw,
            kv_frac,
            hw,
            tokens,
            sampled,
            kv_read,
            pairs,
            padded,
            pre_tok,
            pre_kv,
            pre_pairs,
            float(n_sched - n_dec),  # prefilling sequences
            acc_bytes,
            acc_flops,
            acc_link,
            row,
        )
        gpu = 0.0
        for k in range(7):
            if k != K_HOST:
                gpu += row[k]
        host = row[K_HOST] + host_iter + host_req * n_sched
        if overlap:  # the CPU prepares this step while the GPU runs the previous one
            host = max(0.0, host - gpu)
        row[K_HOST] = host
        dur = gpu + host
        t_end = t + dur

        # ---- advance the sequences
        for s in range(n_sched):
            i = sched[s]
            if s < n_dec:
                gen[i] += 1.0
                if np.isnan(req[i, R_FIRST]):  # E_READY: the decode pool's first token
                    req[i, R_FIRST] = t_end
                    req[i, R_FIRST_STEP] = n_steps
                    last_tok[i] = t_end
            else:
                done_tok[i] += q_of[i]
                if done_tok[i] < pre_len[i]:
                    continue
                gen[i] += 1.0  # the last prefill chunk emits a token
                if preempt:  # the policy selects: free what it drops
                    keep = _blocks(held_tokens(prompt[i], gen[i], caps), block)
                    if keep < blocks[i]:
                        fb[F_FREE] += blocks[i] - keep
                        blocks[i] = keep
                if np.isnan(req[i, R_FIRST]):
                    req[i, R_FIRST] = t_end
                    req[i, R_FIRST_STEP] = n_steps
                    last_tok[i] = t_end
            itl = t_end - last_tok[i]
            if itl > req[i, R_MAX_ITL]:
                req[i, R_MAX_ITL] = itl
            last_tok[i] = t_end
            if gen[i] >= output[i]:
                state[i] = ST_DONE
                req[i, R_DONE] = t_end
                req[i, R_DONE_STEP] = n_steps
                fb[F_FREE] += blocks[i]
                blocks[i] = 0.0
                n_done += 1
                if closed and issued < n:
                    arrival[issued] = t_end + think[issued]
                    issued += 1
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

        if n_steps == steps.shape[0]:
            grown = np.zeros((2 * n_steps, N_STEP))
            grown[:n_steps] = steps
            steps = grown
        st = steps[n_steps]
        st[T_START] = t
        st[T_DUR] = dur
        for c in range(7):
            st[T_CAUSE + c] = row[c]
        st[T_SEQS] = n_sched
        st[T_PADDED] = padded
        st[T_TOKENS] = tokens
        st[T_PREFILL] = fb[F_PREFILL]
        st[T_DECODE] = n_dec
        st[T_KV] = kv * block
        st[T_RESERVED] = (cap_blocks - fb[F_FREE]) * block
        st[T_WAIT] = cnt[C_WAIT]
        st[T_MIXED] = 1.0 if n_dec < n_sched else 0.0
        n_steps += 1
        t = t_end
        in_flight = True
    return req, steps[:n_steps], status
