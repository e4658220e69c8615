"""Numba scheduler of a serving engine: request-level continuous batching over plain arrays.

Each engine step is one fused forward the way real engines run it: the scheduler picks the
step's sequences (decode sequences add one token, prefilling sequences add a chunk of their
prompt), and the step costs ONE pass of the token GEMMs over all the step's tokens plus each
sequence's own attention (the KV tokens it reads, its causal query-key pairs): `kernel.step_core`
over the step's aggregates. Semantics (framework/modes/serving/reference.py is the pure-Python mirror):

- arrivals enter a waiting queue ordered by `order` (fcfs: request order; sjf: shortest prefill
  first), each read once it has arrived, whatever its index (recv.receive); closed loop: a
  finished request's client issues the next request think[k] s later, and it reaches the engine
  strictly after the step boundary its predecessor finished at (one ulp later): an engine loop
  sends a step's outputs and schedules its next step in the same thread, microseconds apart, while
  the client's reply (streamed response, new HTTP request, front end) takes longer, so the step
  scheduled at that boundary never holds it; an idle engine schedules it as soon as it arrives;
  with engine.recv_interval > 1 (SGLang's --scheduler-recv-interval) arrivals are read only on
  polling rounds, under TensorRT-LLM's attention-DP balance only every Eng.ADP_RELEASE steps or by
  an idle group (recv.py);
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
  graphs); a step with prefill work, or a decode-only step larger than Eng.GRAPH_MAX (> 0: the
  largest CUDA graph; engine.graph_overflow=eager), runs unpadded with `call_cost_mixed`;
- host work of the engine loop per step: host_iter + host_req x sequences (the caller passes
  `hw` with its per-step host cost moved into Eng.HOST_ITER). Without overlap the step lasts its
  GPU time + host work; with an overlap scheduler only max(0, host work - GPU time) is exposed.
- ready (Eng.READY, disaggregated decode pools: framework/modes/serving/disagg.py): every request
  arrives with its prompt's KV already in the cache (moved from a prefill instance), so it is
  admitted as a decoding sequence (KV, batch slot; no token budget) before the step's work is
  picked, and its first decode step attends the prompt and emits its first token (vLLM's
  NixlConnector: the decode instance computes the last prompt position); a preempted one
  recomputes like any request.
- in-engine MTP speculative decoding (Eng.SPEC_K = k > 0, modes/serving/mtp.py): a decoding
  sequence puts k + 1 tokens into the step (its last token and k drafts, out of the token budget)
  and emits Eng.SPEC_TOK tokens on average (the expected accepted length), so it finishes after
  about (output - 1) / Eng.SPEC_TOK decode steps; the MTP module's draft passes add to the step's
  time (stepcost.py); the rejected drafts' KV is freed (a sequence holds what it emitted).
The KV policy is the caller's caps (kernel_layout.Cap): a decode step attends attended_tokens(prompt,
prompt + generated, caps); a sequence holds min(min(p, prompt_cap) + g - 1, total_cap) tokens after
its prefill and g generated tokens (the newest token's KV is written by the next step).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.modes.serving import admission as AD
from decodelab.modes.serving import recv as RV
from decodelab.modes.serving import stepcost as SC
from decodelab.modes.serving.parts import held_tokens, kv_blocks, max_held_tokens  # noqa: F401
from decodelab.modes.serving.pick import (
    Agg,
    compact_running,
    pick_step,
    step_aggregates,
)
from decodelab.kernel_layout import Cause
from decodelab.modes.serving.layout import Cnt, Eng, Fb, Ix, Recv, Req, Seq, State, StepLog
from decodelab.modes.serving.admission import Adm


@njit(cache=True)
def log_step(steps, k, t, dur, row, n_sched, n_dec, padded, tokens, kv, fb, cnt):
    """Step k's row of the step log (grown by doubling when full); returns the log."""
    if k == steps.shape[0]:
        grown = np.zeros((2 * k, StepLog.size))
        grown[:k] = steps
        steps = grown
    st = steps[k]
    st[StepLog.START] = t
    st[StepLog.DUR] = dur
    for c in range(Cause.size):
        st[StepLog.CAUSE + c] = row[c]
    st[StepLog.SEQS] = n_sched
    st[StepLog.PADDED] = padded
    st[StepLog.TOKENS] = tokens
    st[StepLog.PREFILL] = fb[Fb.PREFILL]
    st[StepLog.DECODE] = n_dec
    st[StepLog.KV] = kv
    st[StepLog.WAIT] = cnt[Cnt.WAIT]
    st[StepLog.MIXED] = 1.0 if n_dec < n_sched else 0.0
    return steps


@njit(cache=True)
def first_token(req, last_tok, late, n_late, i, t_end, step):
    """Request i's first token, emitted by step `step` ending at t_end; it may be sent later
    (late_tokens). Returns the count of such requests."""
    req[i, Req.FIRST] = t_end
    req[i, Req.FIRST_STEP] = step
    last_tok[i] = t_end
    late[0, n_late] = i
    late[1, n_late] = -1
    return n_late + 1


@njit(cache=True)
def late_tokens(req, arrival, think, late, n_late, step, when):
    """The tokens step `step` emitted reach their clients at `when`, once the engine loop has
    launched the step after it: the lookahead loop launches step n + 1 before it sends step n's
    outputs (TensorRT-LLM PyExecutor._executor_loop_overlap: _forward_step, then
    _process_previous_batch -> _handle_responses; SGLang event_loop_overlap: process_batch_result
    waits for the next batch's launch_done), so an eager next step (a prompt in it) holds them for
    its dispatch. First and last tokens move (TTFT; the client's next request is sent later); the
    tokens between keep their times (ITL)."""
    for j in range(n_late):
        i = late[0, j]
        if req[i, Req.FIRST_STEP] == step and req[i, Req.FIRST] < when:
            req[i, Req.FIRST] = when
        if req[i, Req.DONE_STEP] == step and req[i, Req.DONE] < when:
            req[i, Req.DONE] = when
            k = late[1, j]
            if k >= 0:
                arrival[k] = np.nextafter(when + think[k], np.inf)


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
    draft,
    eng,
    buckets,
    arrival_in,
    prompt,
    output,
    think,
):
    """Simulate the requests (arrival NaN: issued later by a closed-loop client, `think[k]` s
    after a request ends); returns (req[n, Req.size], steps[m, StepLog.size], status) with status 0 =
    all served, 1 = stuck (a request can never be scheduled: the caller checks beforehand).
    `draft`: the MTP draft design's arrays (stepcost.py; unused unless eng[Eng.SPEC_K] > 0)."""
    n = prompt.shape[0]
    arrival = arrival_in.copy()
    order = int(eng[Eng.ORDER])
    preempt = eng[Eng.PREEMPT] > 0.0
    cap_blocks = eng[Eng.CAP_BLOCKS]
    block = eng[Eng.BLOCK]
    closed = eng[Eng.CLOSED] > 0.0
    lookahead = eng[Eng.LOOKAHEAD] > 0.0
    graph_max = eng[Eng.GRAPH_MAX]
    spec_tok = eng[Eng.SPEC_TOK] if eng[Eng.SPEC_TOK] > 0.0 else 1.0  # tokens a decoding sequence emits
    in_flight = False  # a step runs on the GPU while the next one is scheduled (lookahead)
    late_send = eng[Eng.LATE_SEND] > 0.0
    host_end = 0.0  # when the engine loop finished launching the last step (late_tokens)
    # the requests whose first or last token the last step emitted, and the client request each
    # one's end issued (closed loop; -1: none)
    late = np.full((2, n), -1, np.int64)
    n_late = 0
    target = (op_call, op_w, op_lin, call_rep, call_cost, call_cost_mixed, kv_frac, hw)
    scratch = SC.scratch(call_rep.shape[0], tier_bw.shape[0])
    dscratch = SC.scratch(draft[3].shape[0], tier_bw.shape[0])
    row = np.zeros(Cause.size)
    drow = np.zeros(Cause.size)
    agg = np.zeros(Agg.size)
    recv = np.zeros(Recv.size)

    req = np.full((n, Req.size), np.nan)
    req[:, Req.PROMPT] = prompt
    req[:, Req.OUTPUT] = output
    req[:, Req.PREEMPT] = 0.0
    req[:, Req.MAX_ITL] = 0.0
    seq = np.zeros((Seq.size, n))  # the scheduler's state (layout.py), one row per field
    seq[Seq.PROMPT] = prompt
    seq[Seq.OUTPUT] = output
    seq[Seq.PRE] = prompt
    if eng[Eng.READY] > 0.0:  # the prompt's KV arrives with the request (a disaggregated decode pool)
        seq[Seq.DONE] = prompt
    ix = np.zeros((Ix.size, n), np.int64)
    state = ix[Ix.STATE]  # views of the rows serve itself updates
    q_of = seq[Seq.Q]
    done_tok = seq[Seq.DONE]
    pre_len = seq[Seq.PRE]
    gen = seq[Seq.GEN]
    blocks = seq[Seq.BLOCKS]
    last_tok = seq[Seq.LAST]
    cnt = np.zeros(Cnt.size, np.int64)
    fb = np.zeros(Fb.size)
    fb[Fb.FREE] = cap_blocks
    adm = np.zeros(Adm.size)
    adm[Adm.ON] = 1.0 if eng[Eng.ADMIT_RATIO] > 0.0 else 0.0
    adm[Adm.INIT] = eng[Eng.ADMIT_RATIO]
    adm[Adm.RATIO] = eng[Eng.ADMIT_RATIO]
    adm[Adm.MIN] = eng[Eng.ADMIT_MIN]
    adm[Adm.DECAY] = eng[Eng.ADMIT_DECAY]
    adm[Adm.CLIP] = eng[Eng.ADMIT_CLIP]
    adm[Adm.RETRACT] = eng[Eng.ADMIT_RETRACT]
    by_arr, m = RV.sent_order(arrival)
    rp = np.array([0, m], np.int64)  # recv.receive's place in by_arr and in the issued requests
    issued = m if closed else n

    steps = np.zeros((4096, StepLog.size))  # grows by doubling
    n_steps = 0
    n_done = 0
    t = 0.0
    status = 0
    while n_done < n:
        cut = t  # requests that arrived by now are seen by the scheduler
        if lookahead and in_flight:  # this step was scheduled when the previous one started
            cut = steps[n_steps - 1, StepLog.START]
        if RV.reads(recv, eng[Eng.RECV_INTERVAL], eng[Eng.ADP_RELEASE], cnt[Cnt.RUN]):  # recv.py
            RV.receive(arrival, cut, rp, by_arr, m, req, ix, cnt, pre_len, order)
        if cnt[Cnt.RUN] == 0 and cnt[Cnt.WAIT] == 0:
            if in_flight:  # an idle engine schedules as soon as its last step ends
                in_flight = False
                continue
            AD.idle(adm)
            t_next = RV.earliest(arrival, rp, by_arr, m, ix)
            if t_next < np.inf:
                t = t_next
                continue
            status = 1
            break

        # ---- pick the step's work
        n_dec = pick_step(seq, ix, cnt, fb, adm, req, caps, eng, t)
        n_sched = cnt[Cnt.SCHED]
        if n_sched == 0:  # nothing fits now: wait for the next arrival, else stuck
            if in_flight:
                in_flight = False
                continue
            AD.idle(adm)
            t_next = RV.earliest(arrival, rp, by_arr, m, ix) if cnt[Cnt.RUN] == 0 else np.inf
            if t_next < np.inf:
                t = max(t, t_next)
                continue
            status = 1
            break

        # ---- the fused step's aggregates and cost (stepcost.py)
        step_aggregates(seq, ix, n_sched, n_dec, caps, eng, buckets, agg)
        tokens = agg[Agg.TOKENS]
        padded = agg[Agg.PADDED]
        graphed = n_dec == n_sched and (graph_max <= 0.0 or n_sched <= graph_max)
        dur = SC.step_time(
            target, draft, tier_bw, eng, agg, graphed, n_sched, n_dec, scratch, dscratch, row, drow
        )
        t_end = t + dur
        if late_send:  # the loop launches this step, then sends the last step's tokens
            h0 = max(host_end, steps[n_steps - 1, StepLog.START]) if in_flight else t
            host_end = h0 + agg[Agg.LAUNCH]
            if in_flight and host_end > t:
                late_tokens(req, arrival, think, late, n_late, n_steps - 1, host_end)
        n_late = 0

        # ---- advance the sequences
        for s in range(n_sched):
            i = ix[Ix.SCHED, s]
            if s < n_dec:
                gen[i] += spec_tok
                if np.isnan(req[i, Req.FIRST]):  # Eng.READY: the decode pool's first token
                    n_late = first_token(req, last_tok, late, n_late, i, t_end, n_steps)
            else:
                done_tok[i] += q_of[i]
                if done_tok[i] < pre_len[i]:
                    continue
                gen[i] += 1.0  # the last prefill chunk emits a token
                if preempt:  # the policy selects: free what it drops
                    keep = kv_blocks(held_tokens(prompt[i], gen[i], caps), eng)
                    if keep < blocks[i]:
                        fb[Fb.FREE] += blocks[i] - keep
                        blocks[i] = keep
                if np.isnan(req[i, Req.FIRST]):
                    n_late = first_token(req, last_tok, late, n_late, i, t_end, n_steps)
            itl = t_end - last_tok[i]
            if itl > req[i, Req.MAX_ITL]:
                req[i, Req.MAX_ITL] = itl
            last_tok[i] = t_end
            if gen[i] >= output[i]:
                state[i] = State.DONE
                req[i, Req.DONE] = t_end
                req[i, Req.DONE_STEP] = n_steps
                fb[Fb.FREE] += blocks[i]
                blocks[i] = 0.0
                n_done += 1
                if n_late == 0 or late[0, n_late - 1] != i:  # not already held for its first token
                    late[0, n_late] = i
                    late[1, n_late] = -1
                    n_late += 1
                if closed and issued < n:
                    # the client's next request reaches the engine after this boundary's
                    # scheduling decision, not in it (module docstring): one ulp later
                    arrival[issued] = np.nextafter(t_end + think[issued], np.inf)
                    late[1, n_late - 1] = issued
                    issued += 1
        kv = compact_running(seq, ix, cnt, caps, eng)
        steps = log_step(steps, n_steps, t, dur, row, n_sched, n_dec, padded, tokens, kv * block, fb, cnt)
        steps[n_steps, StepLog.RESERVED] = (cap_blocks - fb[Fb.FREE]) * block
        RV.stepped(recv, n_dec < n_sched)
        n_steps += 1
        t = t_end
        in_flight = True
    return req, steps[:n_steps], status
