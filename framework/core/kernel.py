"""The Numba simulation kernel. It knows nothing of models, hardware names or Hydra: it walks the
steps of a request batch over plain arrays and returns each step's time split by cause.

Inputs (all per chip of one tensor-parallel replica):
  op_call[o]        kernel call that op o belongs to
  op_w[o, t]        weight bytes op o reads from memory tier t per invocation
  op_lin[o, :]      linear coefficients, columns kernel_layout.Lin
  call_rep[c]       invocations of call c per step (decoder layers for per-layer calls)
  call_cost[c, :]   per-call overheads and flags, columns kernel_layout.Call; a call
                    with a batch barrier at each invocation (Call.SAMPLE_GAP > 0) idles
                    Call.SAMPLE_GAP * max(0, seqs - Call.FREE_SAMPLES) per invocation while the last
                    samples of the batch leave it (BatchStreaming raises Call.FREE_SAMPLES).
                    Call.LAUNCH_EACH is paid at every invocation (synchronisation, or a launch
                    that cannot overlap the running call); Call.LAUNCH_ASYNC is the host's dispatch
                    of each invocation, enqueued ahead of the GPU: the step waits for its
                    launches only where their sum exceeds its device time, max(0, sum of
                    Call.LAUNCH_ASYNC x invocations - sum of the calls' times) (`dispatch_device`).
  tier_bw[t]        peak bandwidth of tier t (bytes/s); kv_frac[t] share of the KV cache in tier t
  hw[:]             scalar machine parameters, kernel_layout.Hw
  steps[r, :]       the rows to evaluate: (query tokens per sequence, KV tokens the step attends
                    per sequence, sequences, sampled tokens per sequence, prefill flag) -- row 0 is usually
                    the prefill, the rest decode steps. Sampled tokens are the positions whose
                    logits the step computes: 1 for a prefill (only the last prompt position
                    emits a token) and a decode step, k + 1 for a speculative verification.
                    Step.PREFILL is 1 for a prefill row (its sequences take the ops' prefill
                    path). The KV policy is applied by the caller (`attended_tokens`): the
                    kernel reads and attends exactly the tokens a row names.
Output: out[r, k] seconds of row r attributed to cause k (the CAUSES tuple).

`step_core` is the cost of one step from its aggregates (tokens through the token GEMMs, tokens
sampled, KV tokens read and causal query-key pairs summed over the step's sequences);
`step_time` (uniform rows) and the serving scheduler (framework/modes/serving/scheduler.py: fused
prefill + decode steps) call it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core.pipeline import compose, microbatches_nb

from decodelab.core.kernel_lookup import _attn_table, _eff, _pnorm, _table, _weight_ratio
from decodelab.kernel_layout import Acc, Call, Cap, Cause, Hw, Law, Lin, Link, OpPath, Step


@njit(cache=True)
def _step_body(
    op_call,
    op_w,
    op_lin,
    call_rep,
    call_cost,
    tier_bw,
    kv_frac,
    hw,
    tokens,
    sampled,
    kv_read,
    pairs,
    seqs,
    pre_tokens,
    pre_kv,
    pre_pairs,
    pre_seqs,
    acc_bytes,
    acc_flops,
    acc_link,
    out_row,
):
    """The step of kernel.step_core on one tensor-parallel group, without pipeline stages."""
    n_ops = op_call.shape[0]
    n_calls = call_rep.shape[0]
    n_tiers = tier_bw.shape[0]
    act_tier = int(hw[Hw.ACT_TIER])
    attn_rel = hw[Hw.ATTN_REL]
    acc_flops[:n_calls, :] = 0.0
    acc_link[:n_calls, :] = 0.0
    acc_bytes[:n_calls, :n_tiers] = 0.0

    for o in range(n_ops):
        c = op_call[o]
        path = op_lin[o, Lin.PATH]
        if path == OpPath.DECODE:
            tok, ctx, pr = tokens - pre_tokens, kv_read - pre_kv, pairs - pre_pairs
        elif path == OpPath.PREFILL:
            tok, ctx, pr = pre_tokens, pre_kv, pre_pairs
        else:
            tok, ctx, pr = tokens, kv_read, pairs
        law = op_lin[o, Lin.LAW]
        if tok < 0.5 or law == Law.SKIP:  # token counts are whole (padded batches: larger)
            continue  # no sequence of the step takes this op's path
        acc_flops[c, Acc.ACTIVE] = 1.0
        if op_lin[o, Lin.SAMPLED] > 0.0:
            tok = sampled
        if op_lin[o, Lin.REPLICA] > 0.0:
            tok = tok * hw[Hw.DP_TOKENS]  # every attention group's tokens (serving, data-parallel)
        if law != Law.NONE:
            acc_flops[c, Acc.LAW] = 1.0
            if law == Law.GEMM:
                if op_lin[o, Lin.G_TAB] > 0.0:
                    t = _table(op_lin, o, tok)
                else:
                    bytes_t = op_lin[o, Lin.G_CM] + op_lin[o, Lin.G_AM] * tok
                    t = _pnorm(op_lin[o, Lin.G_AC] * tok, bytes_t, op_lin[o, Lin.G_P])
                acc_flops[c, Acc.LAW_T] += t
                acc_flops[c, Acc.LAW_T0] += op_lin[o, Lin.T0]
            elif law == Law.ATTN:
                if path != OpPath.DECODE and pre_tokens >= 0.5:
                    acc_flops[c, Acc.LAW_T] += (
                        op_lin[o, Lin.A_PAIR] * pre_pairs
                        + op_lin[o, Lin.A_TOK] * pre_tokens
                        + op_lin[o, Lin.A_SEQ] * pre_seqs
                    )
                    acc_flops[c, Acc.LAW_T0] += op_lin[o, Lin.T0]
                if path != OpPath.PREFILL and tokens - pre_tokens >= 0.5:
                    if op_lin[o, Lin.D_TAB] > 0.0:  # the measured table (opcost/attention_decode.py)
                        acc_flops[c, Acc.LAW_T] += (
                            _attn_table(op_lin, o, seqs - pre_seqs, kv_read - pre_kv) - op_lin[o, Lin.D_T0]
                        )
                    else:
                        acc_flops[c, Acc.LAW_T] += _pnorm(
                            op_lin[o, Lin.D_SEQ] * (seqs - pre_seqs),
                            op_lin[o, Lin.D_CTX] * (kv_read - pre_kv),
                            op_lin[o, Lin.D_P],
                        )
                    acc_flops[c, Acc.LAW_T0] += op_lin[o, Lin.D_T0]
            if op_lin[o, Lin.C_BYTES] > 0.0:
                if law == Law.COLL and op_lin[o, Lin.G_TAB] > 0.0:  # the measured collective table
                    acc_flops[c, Acc.LAW_COLL] += _table(op_lin, o, tok)
                else:
                    s_bytes = tok * op_lin[o, Lin.C_BYTES]
                    alpha = op_lin[o, Lin.C_LO] if s_bytes < op_lin[o, Lin.C_SW] else op_lin[o, Lin.C_HI]
                    acc_flops[c, Acc.LAW_COLL] += alpha + s_bytes * op_lin[o, Lin.C_INV_BW]
            if law == Law.COLL:
                continue  # the measured collective holds its memory traffic
        w_scale = _weight_ratio(op_lin, o, tok) if op_lin[o, Lin.W_TAB] > 0.0 else 1.0
        for t in range(n_tiers):
            acc_bytes[c, t] += op_w[o, t] * w_scale
        acc_bytes[c, act_tier] += tok * op_lin[o, Lin.ACT_TOK] + ctx * op_lin[o, Lin.ACT_CTX]
        kv = ctx * op_lin[o, Lin.KV_READ_CTX] + tok * op_lin[o, Lin.KV_WRITE_TOK]
        if kv > 0.0:
            for t in range(n_tiers):
                acc_bytes[c, t] += kv * kv_frac[t]
        f_tok = tok * op_lin[o, Lin.FLOPS_TOK] + ctx * op_lin[o, Lin.FLOPS_CTX]
        f_attn = pr * op_lin[o, Lin.ATTN_FLOPS_CTX]
        acc_flops[c, Acc.FLOPS] += f_tok + f_attn
        acc_flops[c, Acc.WORK] += f_tok + f_attn / attn_rel
        if op_lin[o, Lin.C_BYTES] == 0.0:  # else the collective law above
            acc_link[c, Link.BYTES] += tok * op_lin[o, Lin.LINK_TOK]
            acc_link[c, Link.NCOLL] += op_lin[o, Lin.NCOLL]

    for k in range(out_row.shape[0]):
        out_row[k] = 0.0
    peak = hw[Hw.PEAK_FLOPS]
    for c in range(n_calls):
        if acc_flops[c, Acc.ACTIVE] == 0.0:
            continue  # none of the call's ops runs: the call is not issued
        total = 0.0
        mem_i = 0.0
        for t in range(n_tiers):
            total += acc_bytes[c, t]
            mem_i += acc_bytes[c, t] / tier_bw[t]
        mem_a = 0.0
        if total > 0.0:
            mem_a = mem_i / _eff(total, hw[Hw.BW_EFF_MAX], hw[Hw.BW_HALF])
        comp_i = acc_flops[c, Acc.FLOPS] / peak
        comp_a = 0.0
        if acc_flops[c, Acc.FLOPS] > 0.0:
            # = comp_i / eff(F) when attention runs at the GEMM efficiency; the kernel's fixed
            # ramp (compute_half) is not stretched by the slower attention FLOPs
            comp_a = (acc_flops[c, Acc.WORK] + hw[Hw.C_HALF]) / (peak * hw[Hw.C_EFF_MAX])
        link = 0.0
        if acc_link[c, Link.BYTES] > 0.0:
            link = acc_link[c, Link.BYTES] / hw[Hw.LINK_BW]
        latency = acc_link[c, Link.NCOLL] * hw[Hw.COLL_LAT] + acc_flops[c, Acc.LAW_COLL]
        if acc_flops[c, Acc.LAW] > 0.0:
            ach = acc_flops[c, Acc.LAW_T]  # the law's time (its t0 is the call's sync, below)
        else:
            ach = max(mem_a, comp_a)
        if call_cost[c, Call.OVERLAP_LINK] > 0.0:
            # streamed collectives hide their transfer under the call, not their latency: the
            # next layer depends on the reduced result
            body = max(ach, link) + latency
        else:
            body = ach + link + latency
        rep = call_rep[c]
        ideal = min(max(mem_i, comp_i), ach)  # = max(mem_i, comp_i) under the roofline law
        if mem_i >= comp_i:
            out_row[Cause.MEMORY] += rep * ideal
        else:
            out_row[Cause.COMPUTE] += rep * ideal
            acc_flops[c, Acc.CBUSY] = rep * ach
        out_row[Cause.EXCESS] += rep * (ach - ideal)
        out_row[Cause.COLLECTIVES] += rep * (body - ach)
        fill = call_cost[c, Call.FILL_EACH]
        waiting = seqs - call_cost[c, Call.FREE_SAMPLES]
        if waiting > 0.0:
            fill += call_cost[c, Call.SAMPLE_GAP] * waiting
        serial = call_cost[c, Call.LAUNCH_EACH] + acc_flops[c, Acc.LAW_T0]
        out_row[Cause.LAUNCH_SYNC] += rep * serial + call_cost[c, Call.LAUNCH_ONCE]
        out_row[Cause.FILL_DRAIN] += rep * fill + call_cost[c, Call.FILL_ONCE]
        acc_flops[c, Acc.TIME] = (
            rep * (body + fill + serial) + call_cost[c, Call.LAUNCH_ONCE] + call_cost[c, Call.FILL_ONCE]
        )
    sustained(acc_flops, hw, out_row)
    host, device = dispatch_device(call_rep, call_cost, acc_flops)
    if host > device:  # launches enqueued ahead of the GPU: the step lasts max(host, device)
        out_row[Cause.LAUNCH_SYNC] += host - device
    out_row[Cause.HOST] += hw[Hw.HOST_STEP]


@njit(cache=True)
def sustained(acc_flops, hw, out_row):
    """Sustained clocks: a GPU's power governor lowers its SM clock once compute-bound kernels have
    run back to back for a while, where the measured tables (short bursts) hold the burst clock.
    The step's compute-bound time (Acc.CBUSY summed) beyond hw[Hw.SUST_AFTER] seconds takes
    hw[Hw.SUST_SLOW] longer; the extra time goes to Cause.COMPUTE and to each compute-bound call's
    Acc.TIME in proportion to its busy time (a pipeline composes the calls' times)."""
    slow = hw[Hw.SUST_SLOW]
    if slow <= 0.0:
        return
    busy = compute_busy(acc_flops)
    if busy <= hw[Hw.SUST_AFTER]:
        return
    extra = slow * (busy - hw[Hw.SUST_AFTER])
    for c in range(acc_flops.shape[0]):
        acc_flops[c, Acc.TIME] += extra * acc_flops[c, Acc.CBUSY] / busy
    out_row[Cause.COMPUTE] += extra


@njit(cache=True)
def compute_busy(acc_flops):
    """The busy time of the step's compute-bound calls (Acc.CBUSY summed): what `sustained` slows."""
    busy = 0.0
    for c in range(acc_flops.shape[0]):
        busy += acc_flops[c, Acc.CBUSY]
    return busy


@njit(cache=True)
def dispatch_device(call_rep, call_cost, acc_flops):
    """(host, device) of the step _step_body just costed: the host's asynchronous dispatch of its
    issued calls (Call.LAUNCH_ASYNC x invocations) and their device time (the sum of Acc.TIME). The
    step lasts max(host, device): kernels run back to back while the host is ahead, and each
    waits for its launch once the host falls behind (the first launch and the last kernel's
    tail beyond the last launch are not added)."""
    host = 0.0
    device = 0.0
    for c in range(call_rep.shape[0]):
        if acc_flops[c, Acc.ACTIVE] == 0.0:
            continue
        host += call_rep[c] * call_cost[c, Call.LAUNCH_ASYNC]
        device += acc_flops[c, Acc.TIME]
    return host, device


@njit(cache=True)
def step_core(
    op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, tokens, sampled, kv_read, pairs,
    seqs, pre_tokens, pre_kv, pre_pairs, pre_seqs, acc_bytes, acc_flops, acc_link, out_row,
):  # fmt: skip
    """Time of one fused step by cause, from the step's aggregates: `tokens` processed by the
    token GEMMs (decode tokens + prefill chunk tokens), `sampled` of them whose logits are
    computed (the Lin.SAMPLED ops see only these), `kv_read` KV tokens read (sum over the
    step's sequences of the tokens each attends), `pairs` causal (query, key) pairs summed over
    sequences, `seqs` sequences in the step; `pre_*` the part of tokens, kv_read, pairs and seqs
    that belongs to sequences in prefill (OpPath.PREFILL ops see those, OpPath.DECODE ops the rest).
    Serving (framework/modes/serving/scheduler.py) calls this for steps that mix prefill chunks
    and decode tokens; `step_time` for uniform rows. Under pipeline parallelism (hw[Hw.PP] > 1)
    the largest micro-batch is costed and composed over the stages (core/pipeline.py)."""
    pp = hw[Hw.PP]
    if pp <= 1.0:
        _step_body(
            op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, tokens, sampled, kv_read,
            pairs, seqs, pre_tokens, pre_kv, pre_pairs, pre_seqs, acc_bytes, acc_flops, acc_link, out_row,
        )  # fmt: skip
        return
    f, m = microbatches_nb(seqs, hw[Hw.PP_MB])
    _step_body(
        op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, f * tokens, f * sampled,
        f * kv_read, f * pairs, f * seqs, f * pre_tokens, f * pre_kv, f * pre_pairs, f * pre_seqs,
        acc_bytes, acc_flops, acc_link, out_row,
    )  # fmt: skip
    host, device = dispatch_device(call_rep, call_cost, acc_flops)
    if host > device > 0.0:  # a host-bound micro-batch: every call waits on its launches alike
        for c in range(call_rep.shape[0]):
            acc_flops[c, Acc.TIME] *= host / device
    p2p = hw[Hw.P2P_LAT] + f * tokens * (
        hw[Hw.P2P_BYTES_TOK] / hw[Hw.P2P_BW] + hw[Hw.P2P_AG_TOK] / hw[Hw.LINK_BW]
    )
    one_shot = pre_tokens >= tokens
    compose(
        out_row, acc_flops[:, Acc.TIME], call_cost[:, Call.STAGE], hw[Hw.PP_LAYERS], hw[Hw.PP_FIRST],
        hw[Hw.PP_MID], hw[Hw.PP_LAST], pp, float(m), p2p, one_shot, Cause.HOST, Cause.COLLECTIVES, Cause.FILL_DRAIN,
    )  # fmt: skip


@njit(cache=True)
def causal_pairs(q_tok, ctx):
    """Causal (query, key) pairs of one sequence adding q_tok tokens with `ctx` KV tokens after
    the step: query j of q_tok sees ctx - q_tok + j + 1 keys (at least one key per query)."""
    pairs = q_tok * ctx - q_tok * (q_tok - 1.0) / 2.0
    if pairs < q_tok:
        pairs = q_tok
    return pairs


@njit(cache=True)
def step_time(
    op_call,
    op_w,
    op_lin,
    call_rep,
    call_cost,
    tier_bw,
    kv_frac,
    hw,
    q_tok,
    ctx,
    seqs,
    out_tok,
    prefill,
    acc_bytes,
    acc_flops,
    acc_link,
    out_row,
):
    """Time of one uniform step (every sequence adds q_tok tokens, `out_tok` of them sampled, and
    attends `ctx` KV tokens; `prefill` = 1: the sequences are prefilling)."""
    tokens = q_tok * seqs
    kv = seqs * ctx
    pairs = seqs * causal_pairs(q_tok, ctx)
    f = 1.0 if prefill > 0.0 else 0.0
    step_core(
        op_call,
        op_w,
        op_lin,
        call_rep,
        call_cost,
        tier_bw,
        kv_frac,
        hw,
        tokens,
        out_tok * seqs,
        kv,
        pairs,
        seqs,
        f * tokens,
        f * kv,
        f * pairs,
        f * seqs,
        acc_bytes,
        acc_flops,
        acc_link,
        out_row,
    )


@njit(cache=True)
def simulate(op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, steps):
    """Evaluate every row of `steps`; returns out[rows, len(CAUSES)] in seconds."""
    n_rows = steps.shape[0]
    n_calls = call_rep.shape[0]
    out = np.zeros((n_rows, Cause.size))
    acc_bytes = np.zeros((n_calls, tier_bw.shape[0]))
    acc_flops = np.zeros((n_calls, Acc.size))
    acc_link = np.zeros((n_calls, Link.size))
    for r in range(n_rows):
        step_time(
            op_call,
            op_w,
            op_lin,
            call_rep,
            call_cost,
            tier_bw,
            kv_frac,
            hw,
            steps[r, Step.QTOK],
            steps[r, Step.CTX],
            steps[r, Step.SEQS],
            steps[r, Step.OUT],
            steps[r, Step.PREFILL],
            acc_bytes,
            acc_flops,
            acc_link,
            out[r],
        )
    return out


@njit(cache=True)
def attended_tokens(prompt, ctx, caps):
    """KV tokens a step attends for a sequence of `prompt` prompt tokens whose context reaches
    `ctx` after the step, under the policy caps (0 = none). Prefill (ctx <= prompt, whole or
    chunked) attends everything: policies select after the prompt has been seen. Afterwards the
    cache holds min(min(prompt, prompt_cap) + generated, total_cap) tokens, of which at most
    read_cap are read."""
    if ctx <= prompt:
        return ctx
    kept = prompt
    if caps[Cap.PROMPT_CAP] > 0.0 and kept > caps[Cap.PROMPT_CAP]:
        kept = caps[Cap.PROMPT_CAP]
    n = kept + (ctx - prompt)
    if caps[Cap.TOTAL_CAP] > 0.0 and n > caps[Cap.TOTAL_CAP]:
        n = caps[Cap.TOTAL_CAP]
    if caps[Cap.READ_CAP] > 0.0 and n > caps[Cap.READ_CAP]:
        n = caps[Cap.READ_CAP]
    return n


NO_CAPS = np.zeros(Cap.size)


@njit(cache=True)
def _attended_rows(out, prompt_len, caps):
    for r in range(out.shape[0]):
        out[r, Step.CTX] = attended_tokens(prompt_len, out[r, Step.CTX], caps)


def apply_caps(steps: np.ndarray, prompt_len: float, caps: np.ndarray) -> np.ndarray:
    """Rows whose Step.CTX holds the context reached are rewritten to the KV tokens attended."""
    out = np.array(steps, dtype=np.float64)  # a copy
    _attended_rows(out, float(prompt_len), np.asarray(caps, dtype=np.float64))
    return out


def request_steps(batch: int, prompt_len: int, output_len: int, caps: np.ndarray = NO_CAPS) -> np.ndarray:
    """Rows for one static batch: the prefill (emits the first token), then output_len - 1
    decode steps, each adding one token to every sequence."""
    steps = np.empty((output_len, Step.size))
    steps[0] = Step.vector({"qtok": prompt_len, "ctx": prompt_len, "seqs": batch, "out": 1.0, "prefill": 1.0})
    dec = np.arange(1, output_len, dtype=np.float64)
    steps[1:, Step.QTOK] = 1.0
    steps[1:, Step.CTX] = prompt_len + dec
    steps[1:, Step.SEQS] = batch
    steps[1:, Step.OUT] = 1.0
    steps[1:, Step.PREFILL] = 0.0
    return apply_caps(steps, prompt_len, caps) if np.any(caps) else steps
