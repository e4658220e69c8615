"""Admission reserve of a serving engine's scheduler: new requests leave room for the output the
running sequences are still expected to generate (the Numba helpers of
framework/modes/serving/scheduler.py; framework/modes/serving/reference.py mirrors them).

SGLang's `PrefillAdder` (python/sglang/srt/managers/schedule_policy.py, same in 0.5.1.post1 and
0.5.8.post1) admits a waiting request only while

    prompt + min(output left, clip)  <  free KV tokens - sum over running sequences of
                                        ratio x min(their output left, clip)

where requests admitted earlier in the same step count with their whole min(output, clip) (the
prompt tokens they allocate are already gone from the free tokens here). `ratio` (the scheduler's
`new_token_ratio`) starts at `admit_ratio`, falls by (admit_ratio - admit_ratio_min) /
admit_ratio_decay_steps after every decode step (`Scheduler.update_running_batch`), is re-estimated
after a preemption (`ScheduleBatch.retract_decode`: (generated + retract_steps x sequences) /
(their max outputs + 1), at most 1) and goes back to `admit_ratio` when the engine idles
(`self_check_during_idle`). With nothing running (and nothing admitted in the step) the head of
the queue is admitted whatever its reserve, so a request larger than the reserve rule allows
cannot wait forever (SGLang would leave it waiting; a request that large does not occur in the
shipped rows: the check that it fits the pool at all is in engine_vector.engine_inputs).

The state lives in a small array `adm` (adm[Adm.*] below); admit_ratio = 0 turns the rule off.
"""

from __future__ import annotations

from numba import njit

from decodelab.kernel_layout import Layout

# on (1: the rule holds), the ratio now, the reserve of the running sequences this step, the output
# clip, the ratio's start, its floor, its decay per decode step, the retract steps of a preemption
Adm = Layout("Adm", "ON", "RATIO", "OFFSET", "CLIP", "INIT", "MIN", "DECAY", "RETRACT")


@njit(cache=True)
def left(output, gen, clip):
    """Output tokens still to come, clipped as the reserve counts them."""
    return min(max(output - gen, 0.0), clip)


@njit(cache=True)
def start_step(adm, run, n_run, output, gen):
    """The reserve of the running sequences at the start of a step's admission."""
    s = 0.0
    if adm[Adm.ON] > 0.0:
        for j in range(n_run):
            i = run[j]
            s += adm[Adm.RATIO] * left(output[i], gen[i], adm[Adm.CLIP])
    adm[Adm.OFFSET] = s


@njit(cache=True)
def blocks_admission(adm, n_run, total, free_tokens):
    """True when the reserve rule holds back a request needing `total` tokens (prompt + clipped
    output left)."""
    return adm[Adm.ON] > 0.0 and n_run > 0 and total >= free_tokens - adm[Adm.OFFSET]


@njit(cache=True)
def end_step(adm, had_decode, preempted, run, n_run, output, gen):
    """The ratio after a step: re-estimated after a preemption, else decayed by a decode step."""
    if adm[Adm.ON] <= 0.0:
        return
    if preempted:
        dec = 0.0
        mx = 0.0
        for j in range(n_run):
            i = run[j]
            dec += gen[i]
            mx += output[i]
        adm[Adm.RATIO] = min(1.0, (dec + adm[Adm.RETRACT] * n_run) / (mx + 1.0))
    elif had_decode:
        adm[Adm.RATIO] = max(adm[Adm.RATIO] - adm[Adm.DECAY], adm[Adm.MIN])


@njit(cache=True)
def idle(adm):
    """The engine idles: the ratio starts over."""
    adm[Adm.RATIO] = adm[Adm.INIT]
