"""TTFT split at the first wave (framework/modes/serving/metrics.py first_wave_metrics): the requests
a closed loop's clients send together at the start against the rest."""

from __future__ import annotations

import math

import numpy as np
import pytest
from decodelab.modes.serving.metrics import first_wave_metrics


def test_the_first_wave_by_hand():
    """Three clients sent at t = 0 wait 300 / 200 / 100 ms for their first token (each behind the
    prefills before it); two later requests 50 ms each."""
    sent = np.array([0.0, 0.0, 0.0, 1.0, 2.0])
    ttft = np.array([0.3, 0.2, 0.1, 0.05, 0.05])
    m = first_wave_metrics(sent, ttft)
    assert m["first_wave_share_pct"] == pytest.approx(60.0)
    assert m["ttft_first_wave_ms"] == pytest.approx(200.0)
    assert m["ttft_after_first_wave_ms"] == pytest.approx(50.0)
    # the mean TTFT is the two parts weighted by their shares
    assert 0.6 * 200.0 + 0.4 * 50.0 == pytest.approx(1e3 * ttft.mean())


def test_no_first_wave_without_a_burst():
    assert first_wave_metrics(np.array([0.0, 0.5, 0.9]), np.array([0.1, 0.1, 0.1])) == {}  # an open loop
    m = first_wave_metrics(np.zeros(4), np.array([0.1, 0.2, 0.3, 0.4]))  # one round only
    assert m["first_wave_share_pct"] == 100.0 and math.isnan(m["ttft_after_first_wave_ms"])


def test_a_closed_loop_run_reports_its_first_wave():
    """Llama-3.1-8B on one H100, 8 clients, 80 requests: the 8 sent at the start are 10% of them,
    and the mean TTFT is the two parts' weighted mean."""
    from decodelab.api import evaluate

    r = evaluate("tracking=off", "workload=closed_loop", "workload.concurrency=8")
    m = r.metrics
    share = m["first_wave_share_pct"] / 100.0
    assert share == pytest.approx(0.1)
    mixed = share * m["ttft_first_wave_ms"] + (1.0 - share) * m["ttft_after_first_wave_ms"]
    assert mixed == pytest.approx(m["ttft_ms"], rel=1e-9)
