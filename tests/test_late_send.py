"""The lookahead loop sends a step's tokens only after it has launched the next step
(framework/modes/serving/scheduler.py late_tokens): TensorRT-LLM's PyExecutor._executor_loop_overlap
runs _forward_step for batch n + 1 before _process_previous_batch -> _handle_responses of batch n, and
SGLang's event_loop_overlap has process_batch_result wait for the next batch's launch_done. When the
next step is eager (a prompt in it) its dispatch holds the tokens back."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, assert_serve_matches_reference, compose_cfg
from decodelab.core.build import build
from decodelab.kernel_layout import CAUSES
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Req, StepLog
from decodelab.modes.serving.metrics import serving_metrics

# Llama-3.1-8B (the default model), TP1, the default engine: 292 kernel calls per step, 324 kernels
# launched (tests/test_eager_dispatch.py); at 1000 us per kernel an eager step's dispatch is 324 ms,
# far over its GPU time, so every step with a prompt in it lasts exactly that.
DISPATCH = 324 * 1e-3


def _two_prompts(lookahead: str):
    """Two clients send a 1000-token prompt each at t = 0; the budget holds one prompt per step."""
    return compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=2",
        "workload.n_requests=2",
        "workload.warmup_drain=false",
        "workload.prompt_len=1000",
        "workload.output_len=4",
        "engine.max_tokens_per_step=1000",
        "engine.host_iter_us=0",
        "engine.host_per_req_us=0",
        "engine.eager_launch_us=1000",
        f"engine.lookahead={lookahead}",
        *NO_FRONTEND,
    )


def test_first_token_waits_for_the_next_eager_launch():
    """By hand. Step A (t = 0) prefills request 0: eager, 324 ms. Step B (t = 324 ms) prefills
    request 1 alone (its prompt does not fit next to request 0's decode token): eager, 324 ms,
    launched from 324 ms to 648 ms. Request 0's first token left A at 324 ms but the loop sends it
    once B is launched: 648 ms. Request 1's first token (end of B, 648 ms) is followed by a decode
    step the loop launches at once (no host work): it leaves at 648 ms. Without the lookahead loop
    (engine.lookahead=false) request 0's first token leaves at 324 ms."""
    late = _two_prompts("true")
    req, steps, *_ = S.simulate_serving(late, build(late))
    pre = steps[steps[:, StepLog.PREFILL] > 0]
    np.testing.assert_allclose(pre[:, StepLog.DUR], [DISPATCH, DISPATCH], rtol=1e-12)
    np.testing.assert_allclose(req[:, Req.FIRST], [2 * DISPATCH, 2 * DISPATCH], rtol=1e-12)
    plain = _two_prompts("false")
    req0, _, *_ = S.simulate_serving(plain, build(plain))
    np.testing.assert_allclose(req0[:, Req.FIRST], [DISPATCH, 2 * DISPATCH], rtol=1e-12)
    # the tokens between first and last keep the step times: request 0 decodes in the steps after B
    assert req[0, Req.DONE] == pytest.approx(req0[0, Req.DONE], rel=1e-12)


def test_reference_matches_with_late_sends():
    """The pure-Python reference holds the same tokens back (frontend, closed loop and all)."""
    assert_serve_matches_reference(_two_prompts("true"))


def test_tpot_breakdown_counts_the_held_tokens_as_host_time():
    """TPOT by cause still sums to TPOT: a last token sent later than its step's end adds host
    time to the request's decode span, a first token sent later takes it away."""
    cfg = _two_prompts("true")
    design = build(cfg)
    req, steps, *_ = S.simulate_serving(cfg, design)
    m = serving_metrics(cfg, design, req, steps)
    assert sum(m[f"tpot_{c}_ms"] for c in CAUSES) == pytest.approx(m["tpot_ms"], rel=1e-9)
