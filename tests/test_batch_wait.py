"""TensorRT-LLM's batch waiting (engine.batch_wait_timeout_iters, batch_wait_max_tokens_ratio;
framework/modes/serving/recv.py batch_held): prompts next to decoding sequences are held back until
the held steps reach the timeout or the step's tokens reach ratio x the budget. The rule by hand, in
the Numba scheduler and in its pure-Python reference; the InferenceX launch that sets it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import NO_FRONTEND, UNIFORM_LENGTHS, assert_serve_matches_reference, compose_cfg, trace_file
from decodelab.core.build import build
from decodelab.errors import ConfigError
from decodelab.modes.serving import engine_vector as EV
from decodelab.modes.serving import recv as RV
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, Fb, Req, StepLog
from decodelab.modes.serving.reference_recv import BatchWait
from decodelab.runs.validation_predict import row_engine


ADP = ("hardware=dgx_h100", "hardware.n_chips=2", "hardware.tensor_parallel=2", "hardware.attention_dp=2")


def _numba_rule(iters, tokens):
    eng, fb = np.zeros(Eng.size), np.zeros(Fb.size)
    eng[Eng.WAIT_ITERS], eng[Eng.WAIT_TOKENS] = iters, tokens
    return lambda prompts, decodes: RV.batch_held(fb, eng, float(sum(prompts) + sum(decodes)))


def _python_rule(iters, tokens):
    wait = BatchWait(iters, tokens)
    req = lambda n: SimpleNamespace(target=float(n))  # noqa: E731
    return lambda prompts, decodes: wait.held(
        [(None, float(q), True) for q in decodes] + [(req(n), float(n), False) for n in prompts]
    )


@pytest.mark.parametrize("rule", [_numba_rule, _python_rule])
def test_the_waiting_rule_by_hand(rule):
    """Timeout 3 iterations, 500 tokens: a 100-token prompt beside two decodes (102 tokens) is
    held three times, then runs (3 >= 3) and the count starts over; a step of 450 + 60 = 510 tokens
    runs at once. Timeout 0 or ratio 0 (TensorRT-LLM's stop test is met at once): never held."""
    held = rule(3.0, 500.0)
    assert [held([100], [1, 1]) for _ in range(4)] == [True, True, True, False]
    assert held([100], [1, 1])  # counted from 0 again
    assert not held([450], [1] * 60)  # 510 tokens >= 500: released, count reset
    assert held([100], [1, 1])
    for off in (rule(0.0, 500.0), rule(3.0, 0.0)):
        assert not any(off([100], [1]) for _ in range(5))


def _serve(trace, *overrides):
    cfg = compose_cfg(
        "workload=open_loop",
        f"workload.trace={trace}",
        "workload.prompt_dist.kind=trace",
        "workload.output_dist.kind=trace",
        "engine.lookahead=false",
        "engine.max_tokens_per_step=1000",
        *NO_FRONTEND,
        *overrides,
    )
    req, steps, *_ = S.simulate_serving(cfg, build(cfg))
    return cfg, req, steps


def test_the_scheduler_holds_prompts_next_to_decodes(tmp_path):
    """TensorRT-LLM (in-flight batching): request 0 prefills in step 0 and decodes alone; request 1
    (100 tokens) arrives during decode step 5. Without waiting it is prefilled in step 6. With timeout
    10 and ratio 0.8 (800 of the 1000-token budget; 101 tokens in the step) it is admitted in step 6
    but its prefill is held in steps 6-15 (counts 0..9) and runs in step 16 (count 10), its first
    token at that step's end. Ratio 0.1 (100 tokens <= 101): it runs in step 6. A request arriving
    when nothing decodes is never held (an iteration without generation requests does not wait)."""
    probe = trace_file(tmp_path, [(0.0, 100, 400)])
    _, _, steps = _serve(probe)
    t5 = steps[5, StepLog.START] + 0.5 * steps[5, StepLog.DUR]
    late = 10.0 * steps[-1, StepLog.START]
    trace = trace_file(tmp_path, [(0.0, 100, 400), (t5, 100, 4), (late, 100, 4)])
    _, req, steps = _serve(trace)
    assert steps[6, StepLog.PREFILL] == 100.0
    wait = ("engine.batch_wait_timeout_iters=10", "engine.batch_wait_max_tokens_ratio=0.8")
    cfg, req, steps = _serve(trace, *wait)
    assert req[1, Req.START] == steps[6, StepLog.START]
    assert list(steps[6:17, StepLog.PREFILL]) == [0.0] * 10 + [100.0]
    assert req[1, Req.FIRST] == pytest.approx(steps[16, StepLog.START] + steps[16, StepLog.DUR], rel=1e-12)
    assert req[2, Req.START] == late and req[2, Req.FIRST_STEP] == req[2, Req.DONE_STEP] - 3
    assert_serve_matches_reference(cfg)
    _, req, steps = _serve(
        trace, "engine.batch_wait_timeout_iters=10", "engine.batch_wait_max_tokens_ratio=0.1"
    )
    assert steps[6, StepLog.PREFILL] == 100.0


def test_the_numba_scheduler_matches_the_reference_with_waiting():
    """A closed loop of TensorRT-LLM (in-flight batching, overlap lookahead, whole prompts) with
    uniform lengths, timeout 5 and ratio 0.5 or 0.9: the kernel equals its reference."""
    for ratio in (0.5, 0.9):
        cfg = compose_cfg(
            "workload=closed_loop",
            "engine.batch_wait_timeout_iters=5",
            f"engine.batch_wait_max_tokens_ratio={ratio}",
            "engine.max_tokens_per_step=2000",
            "workload.concurrency=6",
            "workload.n_requests=24",
            *UNIFORM_LENGTHS,
        )
        assert S.prepare(cfg, build(cfg))["eng"][Eng.WAIT_TOKENS] == ratio * 2000.0
        assert_serve_matches_reference(cfg)


def test_no_waiting_under_attention_dp_or_in_a_decode_pool():
    """TensorRT-LLM's _schedule waits only without attention DP; a disaggregated decode pool gets no
    prompts: both vectors carry 0 and 0."""
    wait = ("engine.batch_wait_timeout_iters=40", "engine.batch_wait_max_tokens_ratio=0.8")
    one = compose_cfg(*wait)
    assert EV.batch_wait_fields(one, 8192.0, False) == {"wait_iters": 40.0, "wait_tokens": 0.8 * 8192.0}
    assert EV.batch_wait_fields(one, 8192.0, True) == {"wait_iters": 0.0, "wait_tokens": 0.0}
    adp = compose_cfg("workload=closed_loop", *ADP, *wait)
    assert EV.batch_wait_fields(adp, 8192.0, False) == {"wait_iters": 0.0, "wait_tokens": 0.0}


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_wait_timeout_iters", "-1", "engine.batch_wait_timeout_iters=-1 must be >= 0 (0: off)"),
        (
            "batch_wait_max_tokens_ratio",
            "1.5",
            "engine.batch_wait_max_tokens_ratio=1.5 must be in [0, 1] (0: off)",
        ),
    ],
)
def test_bad_waiting_values_are_one_error_line(field, value, message):
    cfg = compose_cfg("workload=closed_loop", f"engine.{field}={value}")
    with pytest.raises(ConfigError, match=re.escape(message)):
        S.prepare(cfg, build(cfg))


def test_the_inferencex_fp8_launch_waits_at_1k1k_from_64_clients():
    """dsr1_fp8_b200_trt.sh (InferenceX #594 to date): DELAY_BATCHING at ISL 1024 / OSL 1024 from 64
    clients: timeout 40, ratio 0.8; every other row of the launch 0 and 0 (the row rule's shape)."""
    rule = (
        ("batch_wait_timeout_iters", {"isl": 1024, "osl": 1024, "below": 64, "then": 0, "else": 40}),
        ("batch_wait_max_tokens_ratio", {"isl": 1024, "osl": 1024, "below": 64, "then": 0.0, "else": 0.8}),
    )
    row = lambda c, isl, osl: {"concurrency": c, "isl": isl, "osl": osl, "row_engine": rule}  # noqa: E731
    on = {"batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8}
    off = {"batch_wait_timeout_iters": 0, "batch_wait_max_tokens_ratio": 0.0}
    assert row_engine(row(64, 1024, 1024)) == on
    assert row_engine(row(256, 1024, 1024)) == on
    assert row_engine(row(32, 1024, 1024)) == off
    assert row_engine(row(64, 8192, 1024)) == off
    assert row_engine(row(128, 1024, 8192)) == off
