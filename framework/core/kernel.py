"""The Numba simulation kernel. It knows nothing of models, hardware names or Hydra: it walks the
steps of a request batch over plain arrays and returns each step's time split by cause.

Inputs (all per chip of one tensor-parallel replica):
  op_call[o]        kernel call that op o belongs to
  op_w[o, t]        weight bytes op o reads from memory tier t per invocation
  op_lin[o, :]      linear coefficients, columns named by the L_* constants below
  call_rep[c]       invocations of call c per step (decoder layers for per-layer calls)
  call_cost[c, :]   per-call overheads and flags, columns named by the C_* constants; a call
                    with a batch barrier at each invocation (C_SAMPLE_GAP > 0) idles
                    C_SAMPLE_GAP * max(0, seqs - C_FREE_SAMPLES) per invocation while the last
                    samples of the batch leave it (BatchStreaming raises C_FREE_SAMPLES).
                    C_LAUNCH_EACH is paid at every invocation (synchronisation, or a launch
                    that cannot overlap the running call); C_LAUNCH_ASYNC is the host's dispatch
                    of each invocation, enqueued ahead of the GPU: the step waits for its
                    launches only where their sum exceeds its device time, max(0, sum of
                    C_LAUNCH_ASYNC x invocations - sum of the calls' times) (`dispatch_device`).
  tier_bw[t]        peak bandwidth of tier t (bytes/s); kv_frac[t] share of the KV cache in tier t
  hw[:]             scalar machine parameters, named by the H_* constants
  steps[r, :]       the rows to evaluate: (query tokens per sequence, KV tokens the step attends
                    per sequence, sequences, sampled tokens per sequence, prefill flag) -- row 0 is usually
                    the prefill, the rest decode steps. Sampled tokens are the positions whose
                    logits the step computes: 1 for a prefill (only the last prompt position
                    emits a token) and a decode step, k + 1 for a speculative verification.
                    S_PREFILL is 1 for a prefill row (its sequences take the ops' prefill
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

from decodelab.kernel_layout import *  # noqa: F403 -- the array layout is this module's interface
from decodelab.core.kernel_lookup import _attn_table, _eff, _pnorm, _table, _weight_ratio


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
    act_tier = int(hw[H_ACT_TIER])
    attn_rel = hw[H_ATTN_REL]
    for c in range(n_calls):
        for a in range(N_ACC):
            acc_flops[c, a] = 0.0
        acc_link[c, 0] = 0.0
        acc_link[c, 1] = 0.0
        for t in range(n_tiers):
            acc_bytes[c, t] = 0.0

    for o in range(n_ops):
        c = op_call[o]
        path = op_lin[o, L_PATH]
        if path == PATH_DECODE:
            tok, ctx, pr = tokens - pre_tokens, kv_read - pre_kv, pairs - pre_pairs
        elif path == PATH_PREFILL:
            tok, ctx, pr = pre_tokens, pre_kv, pre_pairs
        else:
            tok, ctx, pr = tokens, kv_read, pairs
        law = op_lin[o, L_LAW]
        if tok < 0.5 or law == LAW_SKIP:  # token counts are whole (padded batches: larger)
            continue  # no sequence of the step takes this op's path
        acc_flops[c, A_ACTIVE] = 1.0
        if op_lin[o, L_SAMPLED] > 0.0:
            tok = sampled
        if op_lin[o, L_REPLICA] > 0.0:
            tok = tok * hw[H_DP_TOKENS]  # every attention group's tokens (serving, data-parallel)
        if law != LAW_NONE:
            acc_flops[c, A_LAW] = 1.0
            if law == LAW_GEMM:
                if op_lin[o, L_G_TAB] > 0.0:
                    t = _table(op_lin, o, tok)
                else:
                    t = _pnorm(
                        op_lin[o, L_G_AC] * tok, op_lin[o, L_G_CM] + op_lin[o, L_G_AM] * tok, op_lin[o, L_G_P]
                    )
                acc_flops[c, A_LAW_T] += t
                acc_flops[c, A_LAW_T0] += op_lin[o, L_T0]
            elif law == LAW_ATTN:
                if path != PATH_DECODE and pre_tokens >= 0.5:
                    acc_flops[c, A_LAW_T] += (
                        op_lin[o, L_A_PAIR] * pre_pairs
                        + op_lin[o, L_A_TOK] * pre_tokens
                        + op_lin[o, L_A_SEQ] * pre_seqs
                    )
                    acc_flops[c, A_LAW_T0] += op_lin[o, L_T0]
                if path != PATH_PREFILL and tokens - pre_tokens >= 0.5:
                    if op_lin[o, L_D_TAB] > 0.0:  # the measured table (opcost/attention_decode.py)
                        acc_flops[c, A_LAW_T] += (
                            _attn_table(op_lin, o, seqs - pre_seqs, kv_read - pre_kv) - op_lin[o, L_D_T0]
                        )
                    else:
                        acc_flops[c, A_LAW_T] += _pnorm(
                            op_lin[o, L_D_SEQ] * (seqs - pre_seqs),
                            op_lin[o, L_D_CTX] * (kv_read - pre_kv),
                            op_lin[o, L_D_P],
                        )
                    acc_flops[c, A_LAW_T0] += op_lin[o, L_D_T0]
            if op_lin[o, L_C_BYTES] > 0.0:
                if law == LAW_COLL and op_lin[o, L_G_TAB] > 0.0:  # the measured collective table
                    acc_flops[c, A_LAW_COLL] += _table(op_lin, o, tok)
                else:
                    s_bytes = tok * op_lin[o, L_C_BYTES]
                    alpha = op_lin[o, L_C_LO] if s_bytes < op_lin[o, L_C_SW] else op_lin[o, L_C_HI]
                    acc_flops[c, A_LAW_COLL] += alpha + s_bytes * op_lin[o, L_C_INV_BW]
            if law == LAW_COLL:
                continue  # the measured collective holds its memory traffic
        w_scale = _weight_ratio(op_lin, o, tok) if op_lin[o, L_W_TAB] > 0.0 else 1.0
        for t in range(n_tiers):
            acc_bytes[c, t] += op_w[o, t] * w_scale
        acc_bytes[c, act_tier] += tok * op_lin[o, L_ACT_TOK] + ctx * op_lin[o, L_ACT_CTX]
        kv = ctx * op_lin[o, L_KV_READ_CTX] + tok * op_lin[o, L_KV_WRITE_TOK]
        if kv > 0.0:
            for t in range(n_tiers):
                acc_bytes[c, t] += kv * kv_frac[t]
        f_tok = tok * op_lin[o, L_FLOPS_TOK] + ctx * op_lin[o, L_FLOPS_CTX]
        f_attn = pr * op_lin[o, L_ATTN_FLOPS_CTX]
        acc_flops[c, A_FLOPS] += f_tok + f_attn
        acc_flops[c, A_WORK] += f_tok + f_attn / attn_rel
        if op_lin[o, L_C_BYTES] == 0.0:  # else the collective law above
            acc_link[c, 0] += tok * op_lin[o, L_LINK_TOK]
            acc_link[c, 1] += op_lin[o, L_NCOLL]

    for k in range(out_row.shape[0]):
        out_row[k] = 0.0
    peak = hw[H_PEAK_FLOPS]
    for c in range(n_calls):
        if acc_flops[c, A_ACTIVE] == 0.0:
            continue  # none of the call's ops runs: the call is not issued
        total = 0.0
        mem_i = 0.0
        for t in range(n_tiers):
            total += acc_bytes[c, t]
            mem_i += acc_bytes[c, t] / tier_bw[t]
        mem_a = 0.0
        if total > 0.0:
            mem_a = mem_i / _eff(total, hw[H_BW_EFF_MAX], hw[H_BW_HALF])
        comp_i = acc_flops[c, A_FLOPS] / peak
        comp_a = 0.0
        if acc_flops[c, A_FLOPS] > 0.0:
            # = comp_i / eff(F) when attention runs at the GEMM efficiency; the kernel's fixed
            # ramp (compute_half) is not stretched by the slower attention FLOPs
            comp_a = (acc_flops[c, A_WORK] + hw[H_C_HALF]) / (peak * hw[H_C_EFF_MAX])
        link = 0.0
        if acc_link[c, 0] > 0.0:
            link = acc_link[c, 0] / hw[H_LINK_BW]
        latency = acc_link[c, 1] * hw[H_COLL_LAT] + acc_flops[c, A_LAW_COLL]
        if acc_flops[c, A_LAW] > 0.0:
            ach = acc_flops[c, A_LAW_T]  # the law's time (its t0 is the call's sync, below)
        else:
            ach = max(mem_a, comp_a)
        if call_cost[c, C_OVERLAP_LINK] > 0.0:
            # streamed collectives hide their transfer under the call, not their latency: the
            # next layer depends on the reduced result
            body = max(ach, link) + latency
        else:
            body = ach + link + latency
        rep = call_rep[c]
        ideal = min(max(mem_i, comp_i), ach)  # = max(mem_i, comp_i) under the roofline law
        if mem_i >= comp_i:
            out_row[K_MEM] += rep * ideal
        else:
            out_row[K_COMP] += rep * ideal
        out_row[K_EXCESS] += rep * (ach - ideal)
        out_row[K_COLL] += rep * (body - ach)
        fill = call_cost[c, C_FILL_EACH]
        waiting = seqs - call_cost[c, C_FREE_SAMPLES]
        if waiting > 0.0:
            fill += call_cost[c, C_SAMPLE_GAP] * waiting
        serial = call_cost[c, C_LAUNCH_EACH] + acc_flops[c, A_LAW_T0]
        out_row[K_LAUNCH] += rep * serial + call_cost[c, C_LAUNCH_ONCE]
        out_row[K_FILL] += rep * fill + call_cost[c, C_FILL_ONCE]
        acc_flops[c, A_TIME] = (
            rep * (body + fill + serial) + call_cost[c, C_LAUNCH_ONCE] + call_cost[c, C_FILL_ONCE]
        )
    host, device = dispatch_device(call_rep, call_cost, acc_flops)
    if host > device:  # launches enqueued ahead of the GPU: the step lasts max(host, device)
        out_row[K_LAUNCH] += host - device
    out_row[K_HOST] += hw[H_HOST_STEP]


@njit(cache=True)
def dispatch_device(call_rep, call_cost, acc_flops):
    """(host, device) of the step _step_body just costed: the host's asynchronous dispatch of its
    issued calls (C_LAUNCH_ASYNC x invocations) and their device time (the sum of A_TIME). The
    step lasts max(host, device): kernels run back to back while the host is ahead, and each
    waits for its launch once the host falls behind (the first launch and the last kernel's
    tail beyond the last launch are not added)."""
    host = 0.0
    device = 0.0
    for c in range(call_rep.shape[0]):
        if acc_flops[c, A_ACTIVE] == 0.0:
            continue
        host += call_rep[c] * call_cost[c, C_LAUNCH_ASYNC]
        device += acc_flops[c, A_TIME]
    return host, device


@njit(cache=True)
def step_core(
    op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, tokens, sampled, kv_read, pairs,
    seqs, pre_tokens, pre_kv, pre_pairs, pre_seqs, acc_bytes, acc_flops, acc_link, out_row,
):  # fmt: skip
    """Time of one fused step by cause, from the step's aggregates: `tokens` processed by the
    token GEMMs (decode tokens + prefill chunk tokens), `sampled` of them whose logits are
    computed (the L_SAMPLED ops see only these), `kv_read` KV tokens read (sum over the
    step's sequences of the tokens each attends), `pairs` causal (query, key) pairs summed over
    sequences, `seqs` sequences in the step; `pre_*` the part of tokens, kv_read, pairs and seqs
    that belongs to sequences in prefill (PATH_PREFILL ops see those, PATH_DECODE ops the rest).
    Serving (framework/modes/serving/scheduler.py) calls this for steps that mix prefill chunks
    and decode tokens; `step_time` for uniform rows. Under pipeline parallelism (hw[H_PP] > 1)
    the largest micro-batch is costed and composed over the stages (core/pipeline.py)."""
    pp = hw[H_PP]
    if pp <= 1.0:
        _step_body(
            op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, tokens, sampled, kv_read,
            pairs, seqs, pre_tokens, pre_kv, pre_pairs, pre_seqs, acc_bytes, acc_flops, acc_link, out_row,
        )  # fmt: skip
        return
    f, m = microbatches_nb(seqs, hw[H_PP_MB])
    _step_body(
        op_call, op_w, op_lin, call_rep, call_cost, tier_bw, kv_frac, hw, f * tokens, f * sampled,
        f * kv_read, f * pairs, f * seqs, f * pre_tokens, f * pre_kv, f * pre_pairs, f * pre_seqs,
        acc_bytes, acc_flops, acc_link, out_row,
    )  # fmt: skip
    host, device = dispatch_device(call_rep, call_cost, acc_flops)
    if host > device > 0.0:  # a host-bound micro-batch: every call waits on its launches alike
        for c in range(call_rep.shape[0]):
            acc_flops[c, A_TIME] *= host / device
    p2p = hw[H_P2P_LAT] + f * tokens * (hw[H_P2P_BYTES_TOK] / hw[H_P2P_BW] + hw[H_P2P_AG_TOK] / hw[H_LINK_BW])
    one_shot = pre_tokens >= tokens
    compose(
        out_row, acc_flops[:, A_TIME], call_cost[:, C_STAGE], hw[H_PP_LAYERS], hw[H_PP_FIRST],
        hw[H_PP_MID], hw[H_PP_LAST], pp, float(m), p2p, one_shot, K_HOST, K_COLL, K_FILL,
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
    out = np.zeros((n_rows, 7))
    acc_bytes = np.zeros((n_calls, tier_bw.shape[0]))
    acc_flops = np.zeros((n_calls, N_ACC))
    acc_link = np.zeros((n_calls, 2))
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
            steps[r, S_QTOK],
            steps[r, S_CTX],
            steps[r, S_SEQS],
            steps[r, S_OUT],
            steps[r, S_PREFILL],
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
    if caps[P_PROMPT_CAP] > 0.0 and kept > caps[P_PROMPT_CAP]:
        kept = caps[P_PROMPT_CAP]
    n = kept + (ctx - prompt)
    if caps[P_TOTAL_CAP] > 0.0 and n > caps[P_TOTAL_CAP]:
        n = caps[P_TOTAL_CAP]
    if caps[P_READ_CAP] > 0.0 and n > caps[P_READ_CAP]:
        n = caps[P_READ_CAP]
    return n


NO_CAPS = np.zeros(N_KV_CAPS)


@njit(cache=True)
def _attended_rows(out, prompt_len, caps):
    for r in range(out.shape[0]):
        out[r, S_CTX] = attended_tokens(prompt_len, out[r, S_CTX], caps)


def apply_caps(steps: np.ndarray, prompt_len: float, caps: np.ndarray) -> np.ndarray:
    """Rows whose S_CTX holds the context reached are rewritten to the KV tokens attended."""
    out = np.array(steps, dtype=np.float64)  # a copy
    _attended_rows(out, float(prompt_len), np.asarray(caps, dtype=np.float64))
    return out


def request_steps(batch: int, prompt_len: int, output_len: int, caps: np.ndarray = NO_CAPS) -> np.ndarray:
    """Rows for one static batch: the prefill (emits the first token), then output_len - 1
    decode steps, each adding one token to every sequence."""
    steps = np.empty((output_len, N_STEP))
    steps[0] = (prompt_len, prompt_len, batch, 1.0, 1.0)
    dec = np.arange(1, output_len, dtype=np.float64)
    steps[1:, S_QTOK] = 1.0
    steps[1:, S_CTX] = prompt_len + dec
    steps[1:, S_SEQS] = batch
    steps[1:, S_OUT] = 1.0
    steps[1:, S_PREFILL] = 0.0
    return apply_caps(steps, prompt_len, caps) if np.any(caps) else steps
