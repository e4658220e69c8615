"""TensorRT-LLM's attention-DP balance (engine.dp_attention.balance, framework/modes/serving/recv.py
released and balance_rounds): the release rule and the release period by hand, and the scheduler
reading prompts only at releases, in the Numba kernel and its pure-Python reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, UNIFORM_LENGTHS, assert_serve_matches_reference, compose_cfg, trace_file
from decodelab.core.build import build
from decodelab.modes.serving import recv as RV
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, Recv, Req
from decodelab.modes.serving.reference_recv import Recv as PyRecv


@pytest.mark.parametrize("impl", ["numba", "python"])
def test_the_release_rule_by_hand(impl):
    """Period 60: a group running nothing releases at once; with sequences running, the rounds
    after 1 to 59 steps hold new prompts and the round after the 60th releases, whether or not a
    prompt waits (the counter runs free); period 1 releases every round."""
    if impl == "numba":
        state = np.zeros(Recv.size)
        released = lambda period, running: RV.released(state, period, running)  # noqa: E731
        stepped = lambda: RV.stepped(state, False)  # noqa: E731
    else:
        py = {60.0: PyRecv(1.0, 60.0), 1.0: PyRecv(1.0, 1.0)}
        released = lambda period, running: py[period].released(running)  # noqa: E731
        stepped = lambda: [r.stepped(False) for r in py.values()]  # noqa: E731
    assert released(60.0, 0)  # idle: the first prompt is read at once
    opened = []
    for k in range(1, 121):
        stepped()
        opened.append(k) if released(60.0, 3) else None
    assert opened == [60, 120]
    stepped()
    assert not released(60.0, 3)  # 1 step of 60
    assert released(60.0, 0)  # the group ran out of sequences: released, the count restarts
    stepped()
    assert not released(60.0, 3)
    for _ in range(3):
        stepped()
        assert released(1.0, 3)


def test_the_release_period_by_hand():
    """8 groups, timeout 60. A closed loop of 8 clients per group, outputs of 920 tokens, 1 token
    per step: a prompt per group every 920 / 8 = 115 steps (rate 0.0086957); all 7 other groups
    have had one after a median of -ln(1 - 0.5^(1/7)) / rate = -ln(1 - 0.905724) / 0.0086957 =
    2.361525 / 0.0086957 = 271.6 steps > 60: the timeout. 32 clients at 2.5 tokens per step (MTP):
    rate 32 x 2.5 / 920 = 0.086957, 2.361525 / 0.086957 = 27.16 steps, plus the batching wait
    (0 or 10). One group, or timeout 0: every round; an open loop (no clients): the timeout."""
    assert RV.balance_rounds(8, 60, 0, 8, 920.0, 1.0) == 60.0
    assert RV.balance_rounds(8, 60, 0, 32, 920.0, 2.5) == pytest.approx(27.1575, abs=1e-4)
    assert RV.balance_rounds(8, 60, 10, 32, 920.0, 2.5) == pytest.approx(37.1575, abs=1e-4)
    assert RV.balance_rounds(1, 60, 0, 32, 920.0, 1.0) == 1.0
    assert RV.balance_rounds(8, 0, 0, 8, 920.0, 1.0) == 1.0
    assert RV.balance_rounds(8, 60, 10, 0, 920.0, 1.0) == 60.0


ADP = ("hardware=dgx_h100", "hardware.n_chips=2", "hardware.tensor_parallel=2", "hardware.attention_dp=2")
ADP += NO_FRONTEND


def _serve(trace, *balance):
    cfg = compose_cfg(
        *ADP, "workload=open_loop", f"workload.trace={trace}", "engine.lookahead=false", *balance
    )
    req, steps, *_ = S.simulate_serving(cfg, build(cfg))
    return cfg, req, steps


BALANCE = ("engine.dp_attention.balance=true", "engine.dp_attention.balance_timeout_iters=30")


def test_the_scheduler_reads_prompts_at_releases(tmp_path):
    """Two groups; the open loop deals requests 0, 2, ... to the simulated group. Its request 0
    (prefill in step 0, then decode steps) runs alone; a prompt arriving during decode step 5 starts
    in step 6 without the balance, and in step 30 with it (timeout 30, the open loop's period: the
    round after 30 steps); one arriving after everything ended starts at its arrival (idle)."""
    probe = trace_file(tmp_path, [(0.0, 100, 400), (0.0, 100, 400)])
    _, _, steps = _serve(probe)
    t5 = steps[5, 0] + 0.5 * steps[5, 1]  # StepLog START, DUR: inside decode step 5
    late = 10.0 * steps[-1, 0]
    rows = [(0.0, 100, 400), (0.0, 100, 400), (t5, 100, 4), (t5, 100, 4), (late, 100, 4), (late, 100, 4)]
    trace = trace_file(tmp_path, rows)
    _, req, steps = _serve(trace)
    assert req[1, Req.START] == steps[6, 0]
    cfg, req, steps = _serve(trace, *BALANCE)
    assert S.prepare(cfg, build(cfg))["eng"][Eng.ADP_RELEASE] == 30.0
    assert req[1, Req.START] == steps[30, 0]
    assert req[2, Req.START] == late
    assert_serve_matches_reference(cfg)


def test_the_numba_scheduler_matches_the_reference_with_the_balance():
    """A closed loop of 12 clients over 2 groups (6 each), uniform lengths, batching wait 3: timeout
    3 (released by the timeout) and 40 (the other group has a prompt after ~4 steps, then 3 more):
    the kernel equals its reference."""
    for timeout in (3, 40):
        cfg = compose_cfg(
            *ADP,
            "workload=closed_loop",
            "engine.dp_attention.balance=true",
            f"engine.dp_attention.balance_timeout_iters={timeout}",
            "engine.dp_attention.balance_wait_iters=3",
            "workload.concurrency=12",
            "workload.n_requests=36",
            *UNIFORM_LENGTHS,
        )
        assert S.prepare(cfg, build(cfg))["eng"][Eng.ADP_RELEASE] > 1.0
        assert_serve_matches_reference(cfg)
