"""Uncertainty bands (`decodelab claims --bands`, decodelab.runs.bands): one-at-a-time swings and
the Latin-hypercube band on a toy law worked by hand, and one real claim figure whose band must
hold its point value (the value `decodelab claims` prints)."""

from __future__ import annotations

import pytest
from decodelab.runs.bands import band, hypercube, run_bands
from decodelab.runs.placeholders import load_params

POINT = {"a": 1.5, "b": 4.0}
RANGES = {"a": (1.0, 2.0), "b": (3.0, 5.0)}


def law(assign):
    """f = a * b, parameters not assigned at their point."""
    v = {**POINT, **assign}
    return v["a"] * v["b"]


def test_one_at_a_time_swings_by_hand():
    b = band(law, RANGES, n=16, seed=0)
    assert b["point"] == 6.0
    # a at 1 and 2 with b = 4: 4 and 8 (swing 4); b at 3 and 5 with a = 1.5: 4.5 and 7.5 (swing 3)
    assert b["oat"] == {"a": (4.0, 8.0), "b": (4.5, 7.5)}
    assert b["swings"] == {"a": 4.0, "b": 3.0}
    assert b["movers"] == [("a", 4.0), ("b", 3.0)]


def test_hypercube_band_lies_within_the_laws_extremes():
    b = band(law, RANGES, n=16, seed=0)
    # f's extremes over the box: 1 * 3 = 3 and 2 * 5 = 10; the band holds the one-at-a-time ends
    assert 3.0 <= b["lo"] <= 4.0 and 8.0 <= b["hi"] <= 10.0
    assert len(b["lhs"]) == 16 and all(3.0 <= v <= 10.0 for v in b["lhs"])
    # the band is the extremes of everything computed: point, one-at-a-time ends, sample
    assert b["lo"] == min(4.0, *b["lhs"]) and b["hi"] == max(8.0, *b["lhs"])
    # with one point in each sixteenth of a's range and of b's, the sample's a*b exceeds the
    # one-at-a-time 8 only where both are high: at least one such point lies above 8 here
    assert b["hi"] > 8.0


def test_hypercube_is_stratified_and_seeded():
    pts = hypercube(RANGES, n=16, seed=3)
    for k, (lo, hi) in RANGES.items():
        strata = sorted(int((p[k] - lo) / (hi - lo) * 16) for p in pts)
        assert strata == list(range(16))
    assert pts == hypercube(RANGES, n=16, seed=3)
    assert pts != hypercube(RANGES, n=16, seed=4)


def test_a_parameter_that_touches_nothing_has_no_swing():
    b = band(lambda a: law({k: v for k, v in a.items() if k != "c"}), {**RANGES, "c": (0.0, 1.0)})
    assert b["swings"]["c"] == 0.0 and [k for k, _ in b["movers"]] == ["a", "b"]


def test_band_of_a_real_figure_holds_its_claims_value(claim_rows):
    rows, evals = run_bands(load_params(), ids=["C5"], n=8)
    claims = {r["fid"]: r for r in claim_rows if r["id"] == "C5"}
    for r in rows:
        assert r["point"] == pytest.approx(claims[r["fid"]]["simulated"], rel=1e-12)
        assert r["lo"] <= r["point"] <= r["hi"]
        assert "sn40l.tdp_w" in r["params"] and all(k != "sn40l.tdp_w" for k, _ in r["movers"])
    # C5 tok/s per user: the exposed all-reduce latency and the fill/drain move it most
    assert {k for k, _ in rows[0]["movers"]} == {"sn40l.collective_latency_us", "sn40l.fill_drain_us"}
    assert evals < 60  # one design: 2 ends x 13 parameters at most, 8 hypercube points
