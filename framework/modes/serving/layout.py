"""Layout of the serving scheduler's plain arrays (framework/modes/serving/scheduler.py and its
jitted helpers parts.py, pick.py, recv.py and stepcost.py; engine_vector.py, simulate.py, disagg.py
and the Python reference read them), each declared once as a `Layout` (kernel_layout.py): the engine vector (`Eng`), the
per-request table (`Req`), the per-step table (`StepLog`), request states (`State`), the
scheduler's state tables of per-request floats (`Seq`) and ints (`Ix`) and its shared counters
(`Cnt`) and floats (`Fb`)."""

from __future__ import annotations

from decodelab.kernel_layout import CAUSES, Layout

# The engine vector eng[Eng.*]: engine_vector.py engine_inputs fills it by these names in lower case,
# reference.py engine_dict reads it back by the same names.
Eng = Layout(
    "Eng",
    "MAX_BATCH",
    "MAX_TOKENS",
    "CHUNK",
    "ORDER",  # index in ORDERS
    "MIXED",
    "PREEMPT",
    "CAP_BLOCKS",
    "BLOCK",
    "CLOSED",
    "OVERLAP",
    "HOST_ITER",
    "HOST_REQ",
    "LOOKAHEAD",
    "ADMIT_RATIO",
    "ADMIT_MIN",
    "ADMIT_DECAY",
    "ADMIT_CLIP",
    "ADMIT_RETRACT",
    "READY",
    "EAGER_HOST",
    "EAGER_DECODE",
    # Sliding-window layers (hybrid models, kv_costs.layer_mix): SLIDE = their share of the KV bytes
    # per token, WINDOW = the window in tokens; SLIDE_MEM = what a sliding layer's token costs in the
    # KV pool: < 0 = only the window is held (engine.swa_kv=window), r >= 0 = r x the tokens held
    # (full: 1, ratio: engine.swa_full_tokens_ratio). 0 / 0 / 1 = every layer a full-attention one.
    "SLIDE",
    "WINDOW",
    "SLIDE_MEM",
    # Sparse attention's cache (components/models/dsa.py, csa.py, msa.py): SPARSE = its share of the KV bytes per
    # token, held whole and read for at most TOPK token-equivalents per query; 0 = none
    "SPARSE",
    "TOPK",
    # the largest decode batch a CUDA graph replays (0 = any: no bucket list, or buckets that cap the
    # batch); a larger decode-only step runs eagerly (engine.graph_overflow=eager)
    "GRAPH_MAX",
    # In-engine MTP speculative decoding (engine.mtp, modes/serving/mtp.py): SPEC_K draft tokens per
    # decoding sequence and step (0 = off: one token per step), each step verifying k + 1 positions
    # and emitting SPEC_TOK tokens on average (the expected accepted length; <= 0 read as 1).
    "SPEC_K",
    "SPEC_TOK",
    # SGLang's --scheduler-recv-interval (engine.recv_interval, recv.py); 1 = every round
    "RECV_INTERVAL",
    # TensorRT-LLM's attention-DP balance (engine.dp_attention.balance, recv.py released): new
    # requests are read once ADP_RELEASE steps have run since the last release, or at once by an idle
    # group; <= 1 = every round
    "ADP_RELEASE",
    # 1: the engine loop sends a step's tokens only after it has launched the next step (the lookahead
    # loop; scheduler.py late_tokens); 0: at the step's end (a disaggregated prefill pool)
    "LATE_SEND",
    # Pool token-equivalents of a held sequence's linear-layer states when they are blocks of the KV
    # pool (engine.state_in_kv_pool; parts.py mem_tokens); 0 = states outside the pool, or none
    "STATE_TOKENS",
    # TensorRT-LLM's batch waiting (engine.batch_wait_timeout_iters, batch_wait_max_tokens_ratio; recv.py
    # batch_held): a step that would put prompts next to decoding sequences leaves them out until
    # WAIT_ITERS such steps have been held or its tokens reach WAIT_TOKENS (ratio x the step budget);
    # 0 and 0 = off
    "WAIT_ITERS",
    "WAIT_TOKENS",
)
ORDERS = ("fcfs", "sjf")

# The per-request table req[i, Req.*] the scheduler returns.
Req = Layout(
    "Req",
    "ARRIVAL",
    "PROMPT",
    "OUTPUT",
    "START",
    "FIRST",
    "DONE",
    "PREEMPT",
    "MAX_ITL",
    "FIRST_STEP",
    "DONE_STEP",
)
# The per-step table steps[s, StepLog.*] the scheduler returns (CAUSE: the step's seconds by cause,
# kernel_layout.CAUSES, in len(CAUSES) columns).
StepLog = Layout(
    "StepLog",
    "START",
    "DUR",
    ("CAUSE", len(CAUSES)),
    "SEQS",
    "PADDED",
    "TOKENS",
    "PREFILL",
    "DECODE",
    "KV",
    "RESERVED",
    "WAIT",
    "MIXED",
)
State = Layout("State", "NEW", "WAIT", "RUN", "DONE")  # a request's state: ix[Ix.STATE, i]

# Scheduler state shared by its helpers (parts.py, pick.py), one row per field and one column
# per request, so that a field is a contiguous 1-D array (seq[Seq.GEN]):
# seq[Seq.size, n], floats: the tokens a sequence puts into this step, the KV blocks it holds, its
# prompt (or recompute) tokens prefilled so far and to prefill, its prompt and output lengths,
# the tokens generated so far and when it last emitted one;
Seq = Layout("Seq", "Q", "BLOCKS", "DONE", "PRE", "PROMPT", "OUTPUT", "GEN", "LAST")
# ix[Ix.size, n], ints: the running list, the waiting queue and the step's sequences (their first
# cnt[Cnt.RUN], cnt[Cnt.WAIT], cnt[Cnt.SCHED] entries), and per request its state (State) and
# whether it is in this step (0/1);
Ix = Layout("Ix", "RUN", "WQ", "SCHED", "STATE", "IN_STEP")
# cnt: the counters (the step's sequences, running, waiting, preemptions so far); fb: free blocks,
# token budget left, prefill tokens in the step, steps batch waiting has held prompts back (recv.py
# batch_held); adm: admission.Adm. The step's parameters are the engine vector (Eng).
Cnt = Layout("Cnt", "SCHED", "RUN", "WAIT", "PREEMPTS")
Fb = Layout("Fb", "FREE", "BUDGET", "PREFILL", "WAITED")
# recv.py's polling state: the summed step weights since the last poll, the weight of the step run
# since the last round (0: none ran), the steps run since the attention-DP balance last released
Recv = Layout("Recv", "COUNT", "WEIGHT", "STEPS")
