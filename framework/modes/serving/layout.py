"""Index layout of the serving scheduler's plain arrays (framework/modes/serving/scheduler.py and
its jitted helpers parts.py and pick.py; the Python reference and simulate.py read them through
`scheduler`): the engine vector (E_*), the per-request table (R_*), the per-step table (T_*),
request states (ST_*), the scheduler's state tables of per-request floats (SQ_*) and ints (IX_*)
and its shared counters (C_*) and floats (F_*)."""

from __future__ import annotations

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
    E_EAGER_HOST,
    E_EAGER_DECODE,
    E_SLIDE,
    E_WINDOW,
    E_SLIDE_MEM,
    E_GRAPH_MAX,
    E_SPEC_K,
    E_SPEC_TOK,
) = range(27)
N_ENG = 27
# Sliding-window layers (hybrid models, kv_costs.layer_mix): E_SLIDE = their share of the KV bytes
# per token, E_WINDOW = the window in tokens; E_SLIDE_MEM = what a sliding layer's token costs in
# the KV pool: < 0 = only the window is held (engine.swa_kv=window), r >= 0 = r x the tokens held
# (full: 1, ratio: engine.swa_full_tokens_ratio). 0 / 0 / 1 = every layer a full-attention one.
# E_GRAPH_MAX: the largest decode batch a CUDA graph replays (0 = any: no bucket list, or buckets
# that cap the batch); a larger decode-only step runs eagerly (engine.graph_overflow=eager).
# In-engine MTP speculative decoding (engine.mtp, modes/serving/mtp.py): E_SPEC_K draft tokens per
# decoding sequence and step (0 = off: one token per step), each step verifying k + 1 positions
# and emitting E_SPEC_TOK tokens on average (the expected accepted length; <= 0 read as 1).
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


# Scheduler state shared by its helpers (parts.py, pick.py), one row per field and one column
# per request, so that a field is a contiguous 1-D array (seq[SQ_GEN]):
# seq[N_SQ, n], floats: the tokens a sequence puts into this step, the KV blocks it holds, its
# prompt (or recompute) tokens prefilled so far and to prefill, its prompt and output lengths,
# the tokens generated so far and when it last emitted one;
(SQ_Q, SQ_BLOCKS, SQ_DONE, SQ_PRE, SQ_PROMPT, SQ_OUTPUT, SQ_GEN, SQ_LAST) = range(8)
N_SQ = 8
# ix[N_IX, n], ints: the running list, the waiting queue and the step's sequences (their first
# cnt[C_RUN], cnt[C_WAIT], cnt[C_SCHED] entries), and per request its state (ST_*) and whether
# it is in this step (0/1);
IX_RUN, IX_WQ, IX_SCHED, IX_STATE, IX_IN_STEP = range(5)
N_IX = 5
# cnt = [n_sched, n_run, n_wait, preemptions]; fb = [free blocks, token budget left, prefill
# tokens in the step]; adm: admission.A_*. The step's parameters are the engine vector (E_*).
C_SCHED, C_RUN, C_WAIT, C_PREEMPTS = range(4)
F_FREE, F_BUDGET, F_PREFILL = range(3)

__all__ = [n for n in dir() if n.isupper() or (n[:1].isupper() and "_" in n)]  # the constants
