"""decodelab validate --explain ROW (framework/runs/validation_explain.py, apps/validate_explain.py):
one row run as the validation table runs it, with where its time went."""

from __future__ import annotations

import json

import pytest
from conftest import cli, inferencex_source
from decodelab.runs import validation_explain as X
from decodelab.runs import validation_predict as P
from decodelab.runs.validation import default_csv
from test_validation_aic import HEAD, NO_POOLS


def test_the_row_runs_as_the_table_runs_it():
    """Row 3 of the shipped CSV (Llama-3.1-8B, TensorRT-LLM 1.0.0rc3, 8 clients, 1k / 512): the
    explained record is the table's record, and the decode time by cause accounts for its TPOT."""
    csv = default_csv()
    (item,) = X.select(csv, "3")
    (table,) = P.predict_rows([item], [], False, "auto")
    (got,) = X.explain([item], [])
    rec = got["record"]
    assert rec["row"] == 3 and rec["concurrency"] == 8 and rec["isl"] == 1024 and rec["osl"] == 512
    assert rec["config"].startswith("model=llama3_1_8b engine=default hardware=h100_sxm")
    assert (rec["ttft_pred"], rec["tpot_pred"]) == (table["ttft_pred"], table["tpot_pred"])
    causes = dict((k, v) for k, v, _ in got["parts"]["tpot"])
    assert set(causes) == {
        "memory",
        "compute",
        "launch_sync",
        "fill_drain",
        "host",
        "collectives",
        "excess",
        "other",
    }
    # the steps from a request's first to its last token are its whole decode span: nothing left over
    assert abs(causes["other"]) < 0.01 * rec["tpot_pred"]
    assert sum(causes.values()) == pytest.approx(rec["tpot_pred"])
    ttft = dict((k, v) for k, v, _ in got["parts"]["ttft"])
    assert ttft["mean"] == rec["ttft_pred"] and ttft["p50"] <= ttft["p90"] <= ttft["p99"]
    assert got["parts"]["pools"] == []  # an aggregated row has no pools


def _aic(tmp_path):
    """Two rows of the InferenceX 2026-03-25 SGLang 0.5.9 B200 run (aic_mapping.yaml): 16 clients at
    1k/1k, which both of its FP8 configs swept (run as each: two candidates), and 128 clients, which
    only the MTP config swept (one)."""
    rows = []
    for clients in (16, 128):
        src = inferencex_source(
            "DeepSeek-R1", clients, "2026-03-25T16:34:14Z", "lmsysorg/sglang:v0.5.9-cu130"
        )
        rows.append(
            f"dsr1_c{clients},{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1-0528,b200_sxm,fp8,agg,1024,1024,"
            f"fp8,fp8_block,{clients},8,1,1,8,1,{NO_POOLS},200,10\n"
        )
    p = tmp_path / "silicon.csv"
    p.write_text(HEAD + "".join(rows))
    return p


def test_a_row_is_named_by_number_or_id_with_every_candidate(tmp_path):
    csv = _aic(tmp_path)
    both = X.select(csv, "1")
    assert [(it[2]["candidate"], it[2]["launch"]) for it in both] == [
        ("1/2", "inferencex-sglang-dsr1-b200-fp8-0325"),
        ("2/2", "inferencex-sglang-dsr1-b200-fp8-mtp"),
    ]
    assert [it[2]["row"] for it in X.select(csv, "dsr1_c128")] == [2]
    with pytest.raises(
        ValueError, match=r"--explain 7: no row of silicon.csv has that row number \(1-2\) or id"
    ):
        X.select(csv, "7")


def test_the_command_prints_the_parts_and_writes_them(tmp_path):
    out = cli(tmp_path, "validate", "--explain", "3", "--out", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    for text in (
        "row 3",
        "TTFT ms",
        "TPOT by cause",
        "engine steps",
        "launch=aic",
        "config: model=llama3_1_8b",
    ):
        assert text in out.stdout
    (dump,) = json.loads((tmp_path / "x" / "h100_llama31_8b_tp1_explain_3.json").read_text())
    assert dump["record"]["row"] == 3 and dump["metrics"]["tpot_ms"] == dump["record"]["tpot_pred"]
    assert set(dump["parts"]) == {"ttft", "tpot", "steps", "pools"}
    bad = cli(tmp_path, "validate", "--explain", "99")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --explain 99: no row of h100_llama31_8b_tp1.csv has that row number (1-42) or id"
    ]
    both = cli(tmp_path, "validate", "--all", "--explain", "3")
    assert both.returncode == 2 and "--explain runs one row of one CSV" in both.stderr
