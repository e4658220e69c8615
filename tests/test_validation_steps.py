"""`decodelab validate --steps` (framework/runs/validation_steps.py): each group's TPOT split into
its decode step D and prefill interference I, TPOT = D + I / (osl - 1), worked by hand."""

from __future__ import annotations

import pandas as pd
import pytest
from decodelab.runs.validation_steps import decoding, fit, step_split


def _rows(d_meas, i_meas, d_pred, i_pred, osls=(128, 256, 512), ttft=(100.0, 100.0), **key):
    base = dict(
        model="m", engine="vllm", engine_version="0.12.0", tp=2, precision="bf16", concurrency=8, isl=1024
    )
    base.update(key)
    return [
        dict(
            base,
            osl=o,
            status="ok",
            tpot_meas=d_meas + i_meas / (o - 1),
            tpot_pred=d_pred + i_pred / (o - 1),
            ttft_meas=ttft[0],
            ttft_pred=ttft[1],
        )
        for o in osls
    ]


def test_fit_recovers_step_and_interference_by_hand():
    # D = 10 ms, I = 1270 ms: TPOT 20 ms at osl 128 (10 + 1270 / 127), 15 ms at osl 255, 12.5 ms at osl 509
    d, i = fit([128, 255, 509], [20.0, 15.0, 12.5])
    assert d == pytest.approx(10.0, rel=1e-12) and i == pytest.approx(1270.0, rel=1e-12)


def test_decoding_requests_by_littles_law_by_hand():
    # 8 clients, osl 101, TPOT 10 ms: 1000 ms of decoding per 1000 + 1000 ms cycle -> 4 decode at once
    assert decoding(8, 101, 1000.0, 10.0) == pytest.approx(4.0, rel=1e-12)
    # no wait before the first token: all 16 decode; a 3000 ms TTFT against a 1000 ms span: a quarter
    assert decoding(16, 101, 0.0, 10.0) == pytest.approx(16.0)
    assert decoding(16, 101, 3000.0, 10.0) == pytest.approx(4.0)


def test_groups_carry_the_mean_decoding_requests():
    # D 10 ms, I 0: TPOT 10 ms at each osl; measured TTFT 1270 ms, predicted 0
    s = step_split(pd.DataFrame(_rows(10.0, 0.0, 10.0, 0.0, osls=(128, 255), ttft=(1270.0, 0.0))))
    # measured: 8 x 1270 / 2540 = 4 at osl 128, 8 x 2540 / 3810 = 16/3 at osl 255; predicted: 8 and 8
    assert s.loc[0, "n_meas"] == pytest.approx((4.0 + 16.0 / 3.0) / 2)
    assert s.loc[0, "n_pred"] == pytest.approx(8.0)


def test_stall_per_other_prompt_and_ttft_gap_by_hand():
    """8 clients: 7 other prompts land in a request's decode span. I measured 1,400 ms against 700
    predicted: each prompt's step is 100 ms short; TTFT 150 against 50 ms: its own first token 100
    ms late, the same figure. One client has no other prompt: NaN."""
    s = step_split(pd.DataFrame(_rows(10.0, 1400.0, 10.0, 700.0, ttft=(150.0, 50.0))))
    assert s.loc[0, "stall_ms"] == pytest.approx(100.0) and s.loc[0, "ttft_gap_ms"] == pytest.approx(100.0)
    one = step_split(pd.DataFrame(_rows(10.0, 0.0, 10.0, 0.0, concurrency=1)))
    assert one.loc[0, "stall_ms"] != one.loc[0, "stall_ms"]


def test_a_group_the_model_runs_fuller_than_measured_is_named(capsys):
    from decodelab.apps.validate_tables import print_steps

    rows = _rows(10.0, 0.0, 10.0, 0.0, osls=(128, 255), ttft=(1270.0, 0.0)) + _rows(
        5.0, 0.0, 5.0, 0.0, osls=(128, 255), tp=8
    )
    print_steps(step_split(pd.DataFrame(rows)))
    out = " ".join(capsys.readouterr().out.split())
    assert "note: 1 group(s) decode more requests at once in the simulation than measured" in out
    assert "vllm 0.12.0 TP2 c8 isl 1024 8.0 vs 4.7" in out and "TP8 c8" not in out


def test_groups_with_two_or_more_osl_values_only():
    df = pd.DataFrame(
        _rows(10.0, 1000.0, 9.0, 1200.0)
        + _rows(5.0, 300.0, 5.5, 300.0, tp=8)
        + _rows(7.0, 0.0, 7.0, 0.0, osls=(128,), concurrency=16)  # one osl: no split
    )
    s = step_split(df).set_index("tp")
    assert list(s.index) == [2, 8]
    assert s.loc[2, "d_meas_ms"] == pytest.approx(10.0) and s.loc[2, "d_pred_ms"] == pytest.approx(9.0)
    assert s.loc[2, "d_err_pct"] == pytest.approx(-10.0) and s.loc[2, "i_pred_ms"] == pytest.approx(1200.0)
    assert s.loc[8, "d_err_pct"] == pytest.approx(10.0) and s.loc[8, "osl"] == "128,256,512"


def test_rows_that_did_not_run_are_left_out():
    rows = _rows(10.0, 1000.0, 9.0, 1200.0)
    rows[0]["status"] = "infeasible"
    s = step_split(pd.DataFrame(rows))
    assert len(s) == 1 and s.loc[0, "rows"] == 2


def test_cli_prints_the_split(tmp_path):
    from conftest import cli

    r = cli(tmp_path, "validate", "--no-track", "--steps")
    assert r.returncode == 0, r.stderr
    assert "decode step D and interference I by group" in r.stdout and "N meas" in r.stdout
    assert "over 14 groups" in r.stdout  # the 42 Llama rows: 14 (concurrency, isl) groups of 3 osl values


def test_cli_says_when_no_rows_differ_only_in_osl(tmp_path):
    """A CSV whose every setting has one output length gets a note, not an empty table."""
    from conftest import cli

    csv = tmp_path / "one_osl.csv"
    csv.write_text(
        "model,engine,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
        "meta-llama/Llama-3.1-8B-Instruct,trtllm,bf16,1,1024,128,4,60.0,7.0\n"
    )
    r = cli(tmp_path, "validate", "--no-track", "--steps", "--csv", str(csv))
    assert r.returncode == 0, r.stderr
    assert "note: --steps: no rows of one_osl.csv differ only in osl" in r.stdout
    assert "decode step D and interference I by group" not in r.stdout
