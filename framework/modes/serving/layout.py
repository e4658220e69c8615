"""Index layout of the serving scheduler's plain arrays (framework/modes/serving/scheduler.py and
its jitted helpers parts.py and pick.py; the Python reference and simulate.py read them through
`scheduler`): the engine vector (E_*), the per-request table (R_*), the per-step table (T_*),
request states (ST_*) and the scheduler's shared counters (C_*) and floats (F_*)."""

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


# Scheduler state shared by the helpers below: cnt = [n_sched, n_run, n_wait, preemptions],
# fb = [free blocks, token budget left, prefill tokens in the step]; adm: admission.A_*.
C_SCHED, C_RUN, C_WAIT, C_PREEMPTS = range(4)
F_FREE, F_BUDGET, F_PREFILL = range(3)

__all__ = [n for n in dir() if n.isupper() or (n[:1].isupper() and "_" in n)]  # the constants
