"""The serving front end (engine.frontend; framework/modes/serving/frontend.py): the delay worked by
hand, TTFT and end-to-end latency timed from the client's send in the aggregated and the
disaggregated modes, closed and open loops, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND as OFF
from conftest import compose_cfg
from decodelab.errors import ConfigError
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving import frontend
from decodelab.modes.serving.layout import Req

ONE_CLIENT = ("workload=closed_loop", "workload.concurrency=1", "workload.n_requests=4")
ONE_CLIENT += ("workload.prompt_len=1024", "workload.output_len=8", "workload.warmup_requests=0")
FIXED = ("workload.prompt_dist.kind=fixed", "workload.output_dist.kind=fixed")


# 6.9 ms + 1024 tokens x 3.9 bytes / 2.0 MB/s = 6.9 + 1.9968 ms (the workloads' English prose)
DELAY_1K = 8.8968


def test_delay_by_hand():
    """6.9 ms + 1024 x 3.9 B / 2 MB/s = 8.8968 ms; 8192 tokens: 6.9 + 15.9744 = 22.8744 ms; the
    random-id prompts of benchmark_serving (6.5 bytes per token): 6.9 + 3.328 = 10.228 ms."""
    cfg = compose_cfg("engine=default", "workload=closed_loop")
    assert (cfg.engine.frontend.request_ms, cfg.engine.frontend.tokenize_mb_s) == (6.9, 2.0)
    assert cfg.workload.prompt_bytes_per_token == 3.9
    d = frontend.delays(cfg.engine, cfg.workload, np.array([1024, 8192]))
    assert d * 1e3 == pytest.approx([DELAY_1K, 22.8744], rel=1e-12)
    cfg = compose_cfg("engine=default", "workload=closed_loop", "workload.prompt_bytes_per_token=6.5")
    assert frontend.delays(cfg.engine, cfg.workload, np.array([1024]))[0] * 1e3 == pytest.approx(10.228)
    cfg = compose_cfg("engine=default", "engine.frontend.tokenize_mb_s=0")
    d = frontend.delays(cfg.engine, cfg.workload, np.array([1024, 8192]))
    assert d * 1e3 == pytest.approx([6.9, 6.9])


def test_arrivals_move_and_come_back():
    arrival, think = np.array([0.0, np.nan]), np.array([0.5, 0.5])
    delay = np.array([0.01, 0.02])
    a, t = frontend.to_scheduler(arrival, think, delay)
    assert a[0] == 0.01 and np.isnan(a[1]) and t.tolist() == [0.51, 0.52]
    req = np.zeros((2, Req.size))
    req[:, Req.ARRIVAL] = [0.01, 3.02]
    back = frontend.to_client(req, delay)
    assert back[:, Req.ARRIVAL].tolist() == pytest.approx([0.0, 3.0])
    assert req[1, Req.ARRIVAL] == 3.02  # the scheduler's rows are not changed in place


@pytest.mark.parametrize("engine", ["default", "vllm", "sglang"])
def test_one_client_ttft_grows_by_the_delay(engine):
    """One client never queues behind another request: its TTFT and end-to-end latency grow by
    exactly the front end's 8.8968 ms (1024-token prompts), its TPOT not at all."""
    base = ("model=llama3_2_1b", "hardware=h100_sxm", f"engine={engine}", *ONE_CLIENT, *FIXED)
    off = evaluate(compose_cfg(*base, *OFF)).metrics
    on = evaluate(compose_cfg(*base)).metrics
    assert on["ttft_ms"] - off["ttft_ms"] == pytest.approx(DELAY_1K, rel=1e-9)
    assert on["e2e_ms"] - off["e2e_ms"] == pytest.approx(DELAY_1K, rel=1e-9)
    assert on["tpot_ms"] == pytest.approx(off["tpot_ms"], rel=1e-12)


def test_open_loop_every_request_from_its_send():
    """Open loop at 2 requests/s on a 1B model: no request waits for another, so every request's
    TTFT, and its time from send to its first step (queue_ms), grows by the 8.8968 ms."""
    base = ("model=llama3_2_1b", "hardware=h100_sxm", "workload=open_loop", "workload.arrival_rate=2")
    base += ("workload.n_requests=8", "workload.prompt_len=1024", "workload.output_len=8", *FIXED)
    off = evaluate(compose_cfg(*base, *OFF), keep_steps=True)
    on = evaluate(compose_cfg(*base), keep_steps=True)
    r0, r1 = off.serving["requests"], on.serving["requests"]
    assert r1[:, Req.ARRIVAL] == pytest.approx(r0[:, Req.ARRIVAL], rel=1e-12)  # the sends
    ttft0, ttft1 = r0[:, Req.FIRST] - r0[:, Req.ARRIVAL], r1[:, Req.FIRST] - r1[:, Req.ARRIVAL]
    assert (ttft1 - ttft0) * 1e3 == pytest.approx(np.full(8, DELAY_1K), rel=1e-9)
    assert on.metrics["queue_ms"] - off.metrics["queue_ms"] == pytest.approx(DELAY_1K, rel=1e-9)


def test_disaggregated_ttft_grows_by_the_delay():
    """One request, open loop, through a 1P1D deployment: the prefill pool sees it 8.8968 ms after
    the send; its first token, timed from the send, comes that much later."""
    base = ("model=llama3_1_8b", "hardware=h100_sxm", "disagg=ib_1p1d", "workload=open_loop")
    base += ("workload.n_requests=1", "workload.prompt_len=1024", "workload.output_len=8", *FIXED)
    off = evaluate(compose_cfg(*base, *OFF)).metrics
    on = evaluate(compose_cfg(*base)).metrics
    assert on["ttft_ms"] - off["ttft_ms"] == pytest.approx(DELAY_1K, rel=1e-9)
    assert on["prefill_ttft_ms"] - off["prefill_ttft_ms"] == pytest.approx(DELAY_1K, rel=1e-9)


def test_closed_loop_disaggregated_ttft_grows_by_the_delay():
    base = ("model=llama3_1_8b", "hardware=h100_sxm", "disagg=ib_1p1d", *ONE_CLIENT, *FIXED)
    off = evaluate(compose_cfg(*base, *OFF)).metrics
    on = evaluate(compose_cfg(*base)).metrics
    assert on["ttft_ms"] - off["ttft_ms"] == pytest.approx(DELAY_1K, rel=1e-6)


@pytest.mark.parametrize("field", ["request_ms", "tokenize_mb_s"])
def test_negative_front_end_is_one_error_line(field):
    res = evaluate(compose_cfg("workload=closed_loop", f"engine.frontend.{field}=-1"))
    assert res.status == "invalid"
    assert f"engine.frontend.{field}=-1" in res.reason and "must be >= 0" in res.reason
    with pytest.raises(ConfigError):
        from decodelab.modes.serving.engine_check import check_engine

        check_engine(compose_cfg(f"engine.frontend.{field}=-1").engine)


def test_prompt_text_must_be_positive():
    res = evaluate(compose_cfg("workload=closed_loop", "workload.prompt_bytes_per_token=0"))
    assert res.status == "invalid"
    assert res.reason == "workload.prompt_bytes_per_token=0.0 must be > 0"


def test_serial_tokenizer_queue_by_hand():
    """One server, first come first served, 1 ms a prompt: two sent at 0 and one at 0.5 ms wait 0,
    1 and 1.5 ms; a request of unknown send (a closed loop's later one) neither waits nor delays."""
    wait = frontend.queued(np.array([0.0, 0.0, 0.0005, np.nan]), np.full(4, 0.001))
    assert wait * 1e3 == pytest.approx([0.0, 1.0, 1.5, 0.0], abs=1e-12)
    assert frontend.queued(np.array([0.0, 0.01]), np.full(2, 0.001)).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "engine, serial",
    [
        ("sglang", True),
        ("vllm_0_16", True),
        ("vllm_0_19", True),
        ("vllm_0_14", False),
        ("vllm", False),
        ("default", False),
    ],
)
def test_a_first_wave_waits_for_a_serial_tokenizer(engine, serial):
    """Four clients send 1024-token English prompts at t = 0 (1.9968 ms each to tokenize): behind a
    serial tokenizer the k-th reaches the scheduler k x 1.9968 ms later than the first."""
    cfg = compose_cfg(f"engine={engine}", "workload=closed_loop")
    assert cfg.engine.frontend.tokenize_serial is serial
    d = frontend.delays(cfg.engine, cfg.workload, np.full(4, 1024), np.zeros(4))
    steps = np.arange(4) * 1.9968 if serial else np.zeros(4)
    assert d * 1e3 == pytest.approx(DELAY_1K + steps, rel=1e-12)
    later = frontend.delays(cfg.engine, cfg.workload, np.full(4, 1024), np.full(4, np.nan))
    assert later * 1e3 == pytest.approx(np.full(4, DELAY_1K), rel=1e-12)
