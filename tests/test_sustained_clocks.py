"""Sustained clocks (core/kernel.py sustained, hardware.sustained_compute_ratio / sustained_after_ms):
a step's compute-bound time beyond `after` runs at `ratio` of the burst rate the tables and
efficiencies were measured at, the extra going to the step's compute cause."""

from __future__ import annotations

import pytest
from conftest import LLAMA8B_H100_PEAK, compose_cfg
from decodelab.modes.dispatch import evaluate

# Llama-3.1-8B BF16 on one H100 under the roofline law at peak (conftest.LLAMA8B_H100_PEAK). Its
# 4,095-token prefill is compute-bound in every GEMM and attention call: 2 x 6,979,588,096
# decoder-stack weights x 4,095 tokens = 57.163 TFLOP, plus 4 x 32 heads x 128 = 16,384 FLOPs per
# causal (query, key) pair x (4,095^2 - 4,095 x 4,094 / 2 = 8,386,560 pairs) x 32 layers = 4.397
# TFLOP: 61.56 TFLOP / 989.4 TFLOP/s = 62.22 ms of compute-bound time.
BASE = LLAMA8B_H100_PEAK
T_C_MS = (2 * 6_979_588_096 * 4095 + 16_384 * 8_386_560 * 32) / 989.4e12 * 1e3


def _m(*ov):
    res = evaluate(compose_cfg(*BASE, *ov))
    assert res["status"] == "ok", res["reason"]
    return res["metrics"]


def test_prefill_beyond_the_onset_runs_at_the_sustained_rate():
    """Ratio 0.8 after 5 ms: the prefill gains (1 / 0.8 - 1) x (62.22 - 5) = 14.31 ms, all of it
    compute; the decode step (memory-bound at one sequence) is unchanged."""
    off = _m("hardware.sustained_compute_ratio=1")
    on = _m("hardware.sustained_compute_ratio=0.8", "hardware.sustained_after_ms=5")
    assert off["ttft_compute_ms"] == pytest.approx(T_C_MS, rel=5e-3)
    extra = 0.25 * (off["ttft_compute_ms"] - 5.0)
    assert extra == pytest.approx(14.31, abs=0.1)
    assert on["ttft_ms"] == pytest.approx(off["ttft_ms"] + extra, rel=1e-9)
    assert on["ttft_compute_ms"] == pytest.approx(off["ttft_compute_ms"] + extra, rel=1e-9)
    assert on["tpot_ms"] == off["tpot_ms"]


def test_no_slowdown_before_the_onset():
    """An onset past the prefill's 62 ms of compute leaves every figure as at burst clocks."""
    off = _m("hardware.sustained_compute_ratio=1")
    late = _m("hardware.sustained_compute_ratio=0.5", "hardware.sustained_after_ms=100")
    assert late["ttft_ms"] == off["ttft_ms"]
    assert late["tpot_ms"] == off["tpot_ms"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("hardware.sustained_compute_ratio=0", "hardware.sustained_compute_ratio=0.0 must be in (0, 1]"),
        ("hardware.sustained_compute_ratio=1.2", "hardware.sustained_compute_ratio=1.2 must be in (0, 1]"),
        ("hardware.sustained_after_ms=-1", "hardware.sustained_after_ms=-1.0 must be >= 0"),
    ],
)
def test_bad_values_are_refused(override, message):
    """An invalid design, recorded with the reason naming the field and its range."""
    r = evaluate(compose_cfg(*BASE, override))
    assert r["status"] == "invalid" and message in r["reason"]
