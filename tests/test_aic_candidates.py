"""Disaggregated rows whose launch the data leaves open (framework/runs/aic_candidates.py): one row per
candidate recipe, the candidates' records merged into their mean by hand, and one such row end to end."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from decodelab.runs import aic_candidates, aic_rows
from decodelab.runs.validation import run_validation
from test_disagg_recipes import FP4, row
from test_validation_aic import HEAD

SGL_FP4 = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")


def expanded(tmp_path, *rows):
    p = tmp_path / "silicon.csv"
    p.write_text(HEAD + "".join(rows))
    return p, aic_rows.frame(p, aic_candidates.expand_all)


def test_ambiguous_pools_become_one_row_per_recipe(tmp_path):
    """512 clients of InferenceX's SGLang FP4 key match max-tpt-dep4-1p-dep8-1d and -2d (1 or 2 decode
    workers; tests/test_disagg_recipes.py): two rows, each with its recipe's pools and nothing refused."""
    _, df = expanded(tmp_path, row(512, t="2026-02-11T01:17:05Z", engine=SGL_FP4))
    assert len(df) == 2 and list(df["row"]) == [1, 1]
    assert list(df["candidate"]) == ["1/2", "2/2"] and list(df["refuse"]) == ["", ""]
    assert sorted(df["decode_workers"]) == [1, 2]
    assert {r.split("/")[-1] for r in df["recipe"]} == {
        "max-tpt-dep4-1p-dep8-1d.yaml",
        "max-tpt-dep4-1p-dep8-2d.yaml",
    }


def test_mtp_or_not_becomes_both(tmp_path):
    """6 clients of the TensorRT-LLM FP4 key: the MTP and non-MTP ctx1_gen5_tep8_batch1 recipes share their
    pools: one row without MTP, one with the MTP file's draft length."""
    _, df = expanded(tmp_path, row(6))
    assert list(df["candidate"]) == ["1/2", "2/2"]
    assert sorted(df["decode_mtp"]) == [0, 3]
    assert df["decode_workers"].nunique() == 1


def test_combine_by_hand():
    """Row 7 ran as two candidates: TTFT 100 and 300 ms, TPOT 10 and 20 ms, measured 250 / 12.5 ms: the
    row's TTFT 200 ms (error -20%), TPOT 15 ms (+20%); its output rate at 4 clients of 101 tokens:
    1000 x 4 x 101 / (200 + 100 x 15) = 237.647 tok/s. Row 3, run once, stays as it is."""
    base = {"concurrency": 4, "osl": 101, "ttft_meas": 250.0, "tpot_meas": 12.5, "tput_meas": 250.0}
    recs = [
        {**base, "row": 7, "candidate": "1/2", "status": "ok", "reason": "", "recipe": "a.yaml", "ttft_pred": 100.0, "tpot_pred": 10.0},
        {**base, "row": 3, "candidate": np.nan, "status": "ok", "reason": "", "recipe": "", "ttft_pred": 1.0, "tpot_pred": 1.0},
        {**base, "row": 7, "candidate": "2/2", "status": "ok", "reason": "", "recipe": "b.yaml", "ttft_pred": 300.0, "tpot_pred": 20.0},
    ]  # fmt: skip
    out = aic_candidates.combine(pd.DataFrame(recs))
    assert list(out["row"]) == [3, 7]
    r = out.iloc[1]
    assert (r["ttft_pred"], r["tpot_pred"]) == (200.0, 15.0)
    assert r["ttft_err_pct"] == pytest.approx(-20.0) and r["tpot_err_pct"] == pytest.approx(20.0)
    assert r["tput_pred"] == pytest.approx(1000 * 4 * 101 / (200 + 100 * 15))
    assert r["recipe"] == "a.yaml | b.yaml" and r["candidate"] == "2 of 2"
    assert r["reason"] == "the mean of 2 candidate launches (TTFT 100-300 ms, TPOT 10.00-20.00 ms)"


def test_combine_over_the_candidates_that_ran():
    base = {
        "row": 1,
        "concurrency": 1,
        "osl": 11,
        "ttft_meas": 10.0,
        "tpot_meas": 1.0,
        "tput_meas": 55.0,
        "recipe": "r",
    }
    recs = [
        {**base, "candidate": "1/2", "status": "ok", "reason": "", "ttft_pred": 12.0, "tpot_pred": 1.5},
        {**base, "candidate": "2/2", "status": "infeasible", "reason": "KV pool too small", "ttft_pred": np.nan, "tpot_pred": np.nan},
    ]  # fmt: skip
    r = aic_candidates.combine(pd.DataFrame(recs)).iloc[0]
    assert r["status"] == "ok" and r["ttft_pred"] == 12.0 and r["candidate"] == "1 of 2"
    assert r["reason"].endswith("; 1 not run: KV pool too small")


def test_validate_reports_the_row_once_with_its_candidates_mean(tmp_path):
    """The 6-client row end to end: one record for CSV row 1, run, its reason naming the two
    launches and the range, its prediction inside that range."""
    p, _ = expanded(tmp_path, row(6))
    df = run_validation(p)
    assert len(df) == 1 and df.iloc[0]["row"] == 1
    r = df.iloc[0]
    assert r["status"] == "ok" and r["candidate"] == "2 of 2"
    assert r["reason"].startswith("the mean of 2 candidate launches (TTFT ")
    lo, hi = (float(x) for x in r["reason"].split("TTFT ")[1].split(" ms")[0].split("-"))
    assert lo <= round(r["ttft_pred"]) <= hi


def test_a_recorded_twin_settles_mtp_or_not(tmp_path):
    """10 clients of the TensorRT-LLM FP4 key match the MTP and non-MTP ctx1_gen5_tep8_batch32 recipes on the
    same pools: two candidates. A db-dump row of the same run (the same TTFT and TPOT, the same clients)
    records those pools and runs without MTP (aic_recipes.recorded_settings), so the row, that run, does
    too: one launch, the non-MTP file."""
    from test_disagg_moe_backend import TEP8_X5, dumped

    _, alone = expanded(tmp_path, row(10))
    assert sorted(alone["decode_mtp"]) == [0, 3]
    _, df = expanded(tmp_path, row(10), dumped(10, "2026-01-29T00:00:00.000Z", TEP8_X5))
    r = df.iloc[0]
    assert len(df[df["row"] == 1]) == 1 and r["decode_mtp"] == 0 and r["refuse"] == ""
    assert r["recipe"] == "recipes/trtllm/b200-fp4/1k1k/stp/ctx1_gen5_tep8_batch32_eplb0_mtp0.yaml"


def test_a_disaggregated_sibling_runs_the_launch_its_run_has_left(tmp_path):
    """10 clients of the TensorRT-LLM FP4 key, measured twice at 15:52:16Z (PR #588's run): TTFT / TPOT
    1000 / 20 ms, whose db-dump copy records the ctx1_gen5_tep8_batch32 pools and so runs them without MTP
    (test above), and 900 / 15 ms, which matches the same pools' MTP and non-MTP files. The run measured
    each file once at a setting, so the second ran the MTP one (draft 3). A row of another time is no
    sibling: it keeps both candidates."""
    from test_disagg_moe_backend import TEP8_X5, dumped

    sibling = row(10).replace("1000.0,20.0", "900.0,15.0")
    later = row(10, t="2026-01-29T18:00:00Z").replace("1000.0,20.0", "800.0,14.0")
    copy = dumped(10, "2026-01-29T00:00:00.000Z", TEP8_X5)
    _, df = expanded(tmp_path, row(10), copy, sibling, later)
    assert list(df["row"]) == [1, 2, 3, 4, 4]
    mtp = df[df["row"] == 3].iloc[0]
    assert mtp["decode_mtp"] == 3 and mtp["refuse"] == ""
    assert mtp["recipe"] == "recipes/trtllm/b200-fp4/1k1k/mtp/ctx1_gen5_tep8_batch32_eplb0_mtp3.yaml"
    assert sorted(df[df["row"] == 4]["decode_mtp"]) == [0, 3]
