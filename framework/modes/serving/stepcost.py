"""The time of one serving step (framework/modes/serving/scheduler.py), jitted: the fused forward
over the step's aggregates (kernel.step_core), the draft passes of in-engine MTP speculative
decoding (Eng.SPEC_K = k > 0; modes/serving/mtp.py) and the engine loop's host work.

A design's arrays travel as one tuple, (op_call, op_w, op_lin, call_rep, call_cost,
call_cost_mixed, kv_frac, hw): call_cost for a decode-only step a CUDA graph replays, the mixed
one for a step launched eagerly. Scratch: (acc_bytes, acc_flops, acc_link) sized for that design.

MTP draft (the model's own MTP module, one decoder layer with the shared embedding and LM head;
TensorRT-LLM's MTP Eagle path reuses it for every draft token, SGLang's NEXTN / EAGLE worker
likewise): after the target's forward has verified each decoding sequence's k + 1 positions, the
module's first pass runs over the step's tokens (the verified positions and any prefill chunk,
whose last position then drafts too) and emits a draft token per sequence that emits a token
(Agg.EMIT); passes 2..k run one token per such sequence (NVIDIA TensorRT-LLM tech blog 2, "DeepSeek
R1 MTP Implementation and Optimization": MTP Eagle, the first MTP forward takes all accepted
tokens, the next ones the last draft token). The draft attends its own one-layer KV cache."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.core.kernel import step_core
from decodelab.modes.serving.layout import (
    Eng,
)
from decodelab.modes.serving.pick import (
    Agg,
)
from decodelab.kernel_layout import Acc, Cause, Link


@njit(cache=True)
def forward(arrays, graphed, tier_bw, tokens, sampled, kv_read, pairs, seqs, pre, scratch, row):
    """Seconds by cause (into `row`) of one forward of a design (`arrays`) over the aggregates;
    `pre`: (tokens, KV read, pairs, sequences) of the prefilling sequences."""
    op_call, op_w, op_lin, call_rep, cc_graph, cc_eager, kv_frac, hw = arrays
    acc_bytes, acc_flops, acc_link = scratch
    step_core(
        op_call, op_w, op_lin, call_rep, cc_graph if graphed else cc_eager, tier_bw, kv_frac, hw,
        tokens, sampled, kv_read, pairs, seqs, pre[0], pre[1], pre[2], pre[3],
        acc_bytes, acc_flops, acc_link, row,
    )  # fmt: skip


@njit(cache=True)
def draft_passes(draft, graphed, tier_bw, agg, pre_seqs, k, scratch, drow, row):
    """Adds to `row` the k draft passes of the MTP module (module docstring)."""
    n = agg[Agg.EMIT]
    if k <= 0 or n <= 0.0:
        return
    pre = (agg[Agg.PRE_TOK], agg[Agg.PRE_KV], agg[Agg.PRE_PAIRS], pre_seqs)
    forward(
        draft,
        graphed,
        tier_bw,
        agg[Agg.TOKENS],
        n,
        agg[Agg.KV],
        agg[Agg.PAIRS],
        agg[Agg.PADDED],
        pre,
        scratch,
        drow,
    )
    for c in range(Cause.size):
        row[c] += drow[c]
    if k > 1:  # one token per emitting sequence, attending what the decoding ones hold
        kv = agg[Agg.KV] - agg[Agg.PRE_KV]
        forward(draft, graphed, tier_bw, n, n, kv, kv, agg[Agg.PADDED], (0.0, 0.0, 0.0, 0.0), scratch, drow)
        for c in range(Cause.size):
            row[c] += (k - 1) * drow[c]


@njit(cache=True)
def step_time(target, draft, tier_bw, eng, agg, graphed, n_sched, n_dec, scratch, dscratch, row, drow):
    """Seconds of one step (its causes into `row`): the target's forward, the MTP draft's passes
    (Eng.SPEC_K), and the engine loop's host work, host_iter + host_req x sequences plus the eager
    dispatch of a step no graph replays (Eng.EAGER_HOST); with the overlap scheduler only the part
    over the step's GPU time is exposed, without it the dispatch beyond the forward's own."""
    pre = (agg[Agg.PRE_TOK], agg[Agg.PRE_KV], agg[Agg.PRE_PAIRS], float(n_sched - n_dec))
    forward(
        target, graphed, tier_bw, agg[Agg.TOKENS], agg[Agg.SAMPLED], agg[Agg.KV], agg[Agg.PAIRS], agg[Agg.PADDED],
        pre, scratch, row,
    )  # fmt: skip
    draft_passes(draft, graphed, tier_bw, agg, pre[3], int(eng[Eng.SPEC_K]), dscratch, drow, row)
    gpu = 0.0
    for c in range(Cause.size):
        if c != Cause.HOST:
            gpu += row[c]
    host = row[Cause.HOST] + eng[Eng.HOST_ITER] + eng[Eng.HOST_REQ] * n_sched
    dispatch = eng[Eng.EAGER_HOST] if (not graphed or eng[Eng.EAGER_DECODE] > 0.0) else 0.0
    agg[Agg.LAUNCH] = host + dispatch  # the host's whole share, exposed or not (scheduler.py: responses)
    if eng[Eng.OVERLAP] > 0.0:  # the CPU prepares this step while the GPU runs the previous one
        host = max(0.0, host + dispatch - gpu)
    else:  # the forward's kernels run while the rest of them are dispatched
        host += max(0.0, dispatch - gpu)
    row[Cause.HOST] = host
    return gpu + host


@njit(cache=True)
def scratch(n_calls, n_tiers):
    """Per-call accumulators step_core fills: (acc_bytes, acc_flops, acc_link)."""
    return np.zeros((n_calls, n_tiers)), np.zeros((n_calls, Acc.size)), np.zeros((n_calls, Link.size))
