"""SGLang's --scheduler-recv-interval (engine.recv_interval, framework/modes/serving/recv.py): new
requests are read only on polling rounds; the rule by hand, in the Numba scheduler and in its
pure-Python reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, UNIFORM_LENGTHS, assert_serve_matches_reference, compose_cfg, trace_file
from decodelab.core.build import build
from decodelab.modes.serving import recv as RV
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Recv, Req
from decodelab.modes.serving.reference_recv import Recv as PyRecv


@pytest.mark.parametrize("poller", ["numba", "python"])
def test_the_polling_rule_by_hand(poller):
    """Interval 30: after a poll, 29 decode steps keep the socket closed, the 30th opens it; a
    step with prefill work (weight 1000) opens the next round; a round with no step since the last
    one (an engine without a batch) polls at once; interval 1 polls every round."""
    if poller == "numba":
        state = np.zeros(Recv.size)
        poll = lambda iv: RV.poll(state, iv)  # noqa: E731
        stepped = lambda prefill: RV.stepped(state, prefill)  # noqa: E731
    else:
        py = {30.0: PyRecv(30.0), 1.0: PyRecv(1.0)}
        poll = lambda iv: py[iv].poll()  # noqa: E731
        stepped = lambda prefill: [r.stepped(prefill) for r in py.values()]  # noqa: E731
    assert poll(30.0)  # the first round: no step yet (idle)
    stepped(True)  # the prompt's prefill step
    assert poll(30.0)
    opened = []
    for k in range(1, 61):  # decode steps
        stepped(False)
        opened.append(k) if poll(30.0) else None
    assert opened == [30, 60]
    stepped(False)
    assert not poll(30.0)  # 1 of 30
    assert poll(30.0)  # no step since the last round: an idle engine reads at once
    stepped(False)
    stepped(True)  # (the last step's weight counts) a prefill step opens the next round
    assert poll(30.0)
    for _ in range(3):
        stepped(False)
        assert poll(1.0)


def _serve(trace, interval):
    cfg = compose_cfg(
        "workload=open_loop",
        f"workload.trace={trace}",
        "engine=vllm",
        "engine.lookahead=false",
        f"engine.recv_interval={interval}",
        *NO_FRONTEND,
    )
    design = build(cfg)
    req, steps, *_ = S.simulate_serving(cfg, design)
    return cfg, req, steps


def test_the_scheduler_reads_arrivals_on_polling_rounds(tmp_path):
    """One long decode (request 0, prefill in step 0, decode steps 1, 2, ...): a request arriving
    during decode step 5 is queued only at the round after the 30th decode step (step 31 admits
    it, a mixed step); one arriving during that mixed step is queued at the next round (step 32);
    one arriving after every request ended is admitted at its arrival (idle). With interval 1 the
    first is admitted at the round after its arrival (step 6)."""
    probe = trace_file(tmp_path, [(0.0, 100, 400)])
    _, _, steps = _serve(probe, 1)
    t5 = steps[5, 0] + 0.5 * steps[5, 1]  # StepLog START, DUR: inside decode step 5
    first = trace_file(tmp_path, [(0.0, 100, 400), (t5, 100, 4)])
    _, req1, steps1 = _serve(first, 1)
    assert req1[1, Req.START] == steps1[6, 0]
    _, req30, steps30 = _serve(first, 30)
    assert req30[1, Req.START] == steps30[31, 0]
    t31 = steps30[31, 0] + 0.5 * steps30[31, 1]
    late = 10.0 * steps30[-1, 0]  # after everything
    full = trace_file(tmp_path, [(0.0, 100, 400), (t5, 100, 4), (t31, 100, 4), (late, 100, 4)])
    cfg, req, steps = _serve(full, 30)
    assert req[1, Req.START] == steps[31, 0]
    assert req[2, Req.START] == steps[32, 0]
    assert req[3, Req.START] == late
    assert_serve_matches_reference(cfg)


def test_the_numba_scheduler_matches_the_reference_with_an_interval():
    """A closed loop of SGLang (separate prefill and decode steps, overlap lookahead, the admission
    reserve, preemption) with uniform lengths and interval 10 and 30: the kernel equals its reference."""
    for interval in (10, 30):
        cfg = compose_cfg(
            "workload=closed_loop",
            "engine=sglang_0_5_8",
            f"engine.recv_interval={interval}",
            "workload.concurrency=6",
            "workload.n_requests=24",
            *UNIFORM_LENGTHS,
        )
        assert_serve_matches_reference(cfg)
