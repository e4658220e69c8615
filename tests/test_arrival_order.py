"""An engine reads every request that has reached it, whatever its index (framework/modes/serving/
recv.py receive): a request sent later that arrives sooner -- a shorter prompt to tokenize, a
disaggregated prefill that ended first -- is not held behind one still on its way. By hand, and
the Numba scheduler against its pure-Python reference on shuffled arrivals."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, SHORT_UNIFORM_OUTPUTS, compose_cfg
from decodelab.core.build import build
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, Req
from decodelab.modes.serving.reference import engine_dict, reference_serve, reference_table

REQ_COLS = [Req.ARRIVAL, Req.START, Req.FIRST, Req.DONE, Req.PREEMPT, Req.MAX_ITL]


def _prepared(n: int, *overrides: str):
    cfg = compose_cfg(
        "workload=open_loop",
        f"workload.n_requests={n}",
        "workload.arrival_rate=50",
        *SHORT_UNIFORM_OUTPUTS,
        *NO_FRONTEND,
        *overrides,
    )
    design = build(cfg)
    return cfg, design, S.prepare(cfg, design)


def _both(cfg, design, p):
    """(the kernel's request rows, the reference's) in REQ_COLS, for p's arrivals as they stand."""
    req, _, status = SK.serve(*p["kernel_args"])
    assert status == 0
    ref = reference_serve(
        design, cfg, p["mixed"], engine_dict(p["eng"], p["buckets"]), p["arrival"], p["prompt"], p["output"], p["think"]
    )  # fmt: skip
    return req[:, REQ_COLS], reference_table(ref)


@pytest.mark.parametrize("ready", [False, True])
def test_a_later_request_arriving_first_is_not_held(ready):
    """Request 0 reaches the engine at 1 s, request 1 at 0 s: request 1 starts at 0 s and ends
    long before request 0 arrives; request 0 starts at its own arrival (the engine is idle then).
    Read in index order, request 1 would wait the whole second."""
    cfg, design, p = _prepared(2)
    p["arrival"][:] = [1.0, 0.0]  # the kernel's arguments hold this array
    if ready:
        p["eng"][Eng.READY] = 1.0  # a disaggregated decode pool: the KV comes with the request
    for rows in _both(cfg, design, p):
        assert rows[1, 1] == 0.0  # START (REQ_COLS order: arrival, start, ...)
        assert rows[1, 3] < 1.0  # DONE
        assert rows[0, 1] == 1.0


@pytest.mark.parametrize("ready", [False, True])
def test_shuffled_arrivals_match_reference(ready):
    """An open loop's arrivals out of index order (a seeded shuffle, one of them 50 ms later): the
    kernel's per-request times equal the reference's, every request starts no earlier than it
    arrives, and not in index order."""
    cfg, design, p = _prepared(24)
    rng = np.random.default_rng(7)
    p["arrival"][:] = rng.permutation(p["arrival"])
    p["arrival"][3] += 0.05
    if ready:
        p["eng"][Eng.READY] = 1.0
    full, ref = _both(cfg, design, p)
    np.testing.assert_allclose(full, ref, rtol=1e-9, atol=1e-12)
    assert (full[:, 1] >= full[:, 0]).all()  # START >= ARRIVAL
    assert (np.argsort(full[:, 1], kind="stable") != np.arange(24)).any()  # not started in index order


@pytest.mark.parametrize("ready", [False, True])
def test_closed_loop_issues_out_of_order_match_reference(ready):
    """A closed loop of 4 clients whose delay before each next request is drawn per request (0-200
    ms, as a disaggregated prefill's): requests issued later reach the engine sooner and start
    before a lower-numbered one has arrived; the kernel's times equal the reference's."""
    cfg = compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=4",
        "workload.n_requests=24",
        *SHORT_UNIFORM_OUTPUTS,
        *NO_FRONTEND,
    )
    design = build(cfg)
    p = S.prepare(cfg, design)
    p["think"][:] = np.random.default_rng(3).uniform(0.0, 0.2, len(p["think"]))
    if ready:
        p["eng"][Eng.READY] = 1.0
    full, ref = _both(cfg, design, p)
    np.testing.assert_allclose(full, ref, rtol=1e-9, atol=1e-12)
    arrival, start = full[:, 0], full[:, 1]
    later_arrival_before = np.maximum.accumulate(arrival)  # the latest arrival among requests 0..i
    # some request starts before a lower-numbered one has arrived (never, read in index order)
    assert (start[1:] < later_arrival_before[:-1]).any()
