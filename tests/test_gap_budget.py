"""tools/gap_budget.py: the floor of one prediction per set of identical rows, and the scores with a
group made exact, on hand-worked rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
gap_budget = pytest.importorskip("gap_budget")


def test_floor_is_the_weighted_median_of_identical_rows():
    """Measurements 1, 2, 4 ms of one setting: weights 1, 1/2, 1/4 put the weighted median at 1,
    errors 0, 50%, 75%, mean 41.67%; a row of other clients is its own set (error 0)."""
    src = "silicon_concurrency={}; measured=x"
    measured = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "isl": [1024] * 4,
            "silicon_data_source": [src.format(4)] * 3 + [src.format(8)],
            "silicon_tpot_ms": [1.0, 2.0, 4.0, 3.0],
            "silicon_ttft_ms": [10.0, 10.0, 10.0, 10.0],
        }
    )
    f = gap_budget.floor(measured)
    assert f["TPOT"] == pytest.approx(100 * (0 + 0.5 + 0.75 + 0) / 4)
    assert f["TTFT"] == 0.0


def test_budget_makes_one_group_exact():
    """Two rows 10% and 30% slow in TPOT (MAPE 20%): the second made exact leaves 5%; its own MAPE
    is 30%; a TTFT-only group leaves TPOT alone."""
    rows = pd.DataFrame(
        {
            "system": ["h100_sxm", "h200_sxm"],
            "tpot_meas": [10.0, 10.0],
            "tpot_pred": [11.0, 13.0],
            "ttft_meas": [100.0, 100.0],
            "ttft_pred": [50.0, 100.0],
        }
    )
    second = pd.Series([False, True])
    table = gap_budget.budget(rows, [("second", second, ("tpot", "ttft")), ("ttft", ~second, ("ttft",))])
    line = table.set_index("group")
    assert line.loc["as predicted", "TPOT MAPE"] == pytest.approx(20.0)
    assert line.loc["second", "TPOT MAPE"] == pytest.approx(5.0)
    assert line.loc["second", "its TPOT"] == pytest.approx(30.0)
    assert line.loc["second", "TPOT bias h200_sxm"] == pytest.approx(0.0)
    assert line.loc["ttft", "TPOT MAPE"] == pytest.approx(20.0)
    assert line.loc["ttft", "TTFT MAPE"] == pytest.approx(0.0)
    assert line.loc["all groups exact", "TPOT MAPE"] == pytest.approx(5.0)
