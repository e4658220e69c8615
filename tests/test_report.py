"""`decodelab report`: the generated reference pages (docs/generated/*.md, README's headline block)
equal what the code computes now (the slow check CI runs), and the pieces that build them: the
marked-block rewrite, the Markdown tables, stale detection, the command's one-line errors."""

from __future__ import annotations

import pytest
from conftest import ROOT, run_in_process
from decodelab.output import report as R
from decodelab.runs.report import GENERATED, Report, expected_files

BEGIN, END = "<!-- BEGIN report:headline -->", "<!-- END report:headline -->"


@pytest.mark.slow
def test_committed_generated_pages_are_current(claim_rows):
    """CI fails here when a change moved a figure the docs quote: run `decodelab report`."""
    from decodelab.apps.report import check

    assert check(ROOT, jobs=1, claim_rows=claim_rows) == []


def test_replace_block_rewrites_only_between_the_markers():
    text = f"# Title\n\nbefore\n{BEGIN}\n- old line\n- another\n{END}\nafter {END}\n"
    new = R.replace_block(text, "headline", "- new line\n")
    assert new == f"# Title\n\nbefore\n{BEGIN}\n- new line\n{END}\nafter {END}\n"
    assert R.replace_block(new, "headline", "- new line") == new  # idempotent, newline added once
    assert R.replace_block(text, "headline", "") == f"# Title\n\nbefore\n{BEGIN}\n{END}\nafter {END}\n"


def test_replace_block_without_markers_is_none():
    assert R.replace_block("# README\n\nno markers\n", "headline", "- x") is None
    assert R.replace_block(f"{BEGIN}\nno end\n", "headline", "- x") is None
    assert R.replace_block(f"{BEGIN}\n{END}\n", "other", "- x") is None  # another block's name


def test_md_table_aligns_and_escapes_pipes():
    t = R.md_table(("a", "b"), [("x|y", 1.5)], (False, True))
    assert t.splitlines() == ["| a | b |", "|---|---:|", "| x\\|y | 1.5 |"]


def _row(cid, fig, pub, sim, ok, tol=0.15, cal=None):
    return {
        "id": cid,
        "figure": fig,
        "published": pub,
        "simulated": sim,
        "pass": ok,
        "tolerance": tol,
        "calibration": cal,
    }


def test_claims_page_orders_ids_and_counts_without_calibrations():
    rows = [
        _row("C10", "ten", "3.7", 3.43, True),
        _row("C2", "geomean", "1.6", 1.5, True, cal="fill_drain_us"),
        _row("C2", "max", "2.2", None, False),
        _row("C4", "range", "45-78", 78.3, False, tol=None),
    ]
    text = R.claims_page(rows)
    body = [ln for ln in text.splitlines() if ln.startswith("| C")]
    assert [ln.split(" | ")[0] for ln in body] == ["| C2", "| C2", "| C4", "| C10"]
    assert "| C2 | geomean | 1.6 | 1.5 | ±15% | calibration |" in body
    assert "| C2 | max | 2.2 | - | ±15% | FAIL |" in body
    assert "| C4 | range | 45-78 | 78.3 | range | FAIL |" in body
    assert "**1 of 3 figures pass (1 calibration figure not counted).**" in text
    assert text.startswith("# Claims") and text.endswith("|\n")


def _report():
    return Report({"claims.md": "# C\n", "headline.md": "# H\n"}, ["line one", "line two"])


def test_expected_files_cover_the_pages_and_a_marked_readme(tmp_path):
    (tmp_path / "README.md").write_text(f"intro\n{BEGIN}\nstale\n{END}\nrest\n")
    files = expected_files(tmp_path, _report())
    assert files[tmp_path / GENERATED / "claims.md"] == "# C\n"
    assert files[tmp_path / "README.md"] == f"intro\n{BEGIN}\n- line one\n- line two\n{END}\nrest\n"
    (tmp_path / "README.md").write_text("no markers\n")
    assert tmp_path / "README.md" not in expected_files(tmp_path, _report())


def test_stale_then_written_then_current(tmp_path):
    files = expected_files(tmp_path, _report())
    assert sorted(R.stale_files(files)) == sorted(files)  # missing counts as stale
    assert sorted(R.write_files(files)) == sorted(files)
    assert R.stale_files(files) == [] and R.write_files(files) == []
    (tmp_path / GENERATED / "claims.md").write_text("# C edited\n")
    assert R.stale_files(files) == [tmp_path / GENERATED / "claims.md"]


def test_check_prints_one_line_per_stale_copy_and_exits_1(tmp_path, monkeypatch):
    from decodelab.apps import report as app

    monkeypatch.setattr(app, "build_report", lambda claim_rows=None, jobs=1: _report())
    (tmp_path / "docs").mkdir()
    code, out, err = run_in_process(tmp_path, ["report", "--check", "--root", str(tmp_path)])
    assert code == 1 and err == "", (code, out, err)
    assert out.splitlines() == [
        "stale: docs/generated/claims.md (regenerate with `decodelab report`)",
        "stale: docs/generated/headline.md (regenerate with `decodelab report`)",
    ]
    code, out, _ = run_in_process(tmp_path, ["report", "--root", str(tmp_path)])
    assert code == 0 and "wrote docs/generated/claims.md" in out
    code, out, _ = run_in_process(tmp_path, ["report", "--check", "--root", str(tmp_path)])
    assert code == 0 and out.strip().endswith("current"), out


@pytest.mark.parametrize(
    "args, words",
    [
        (["--check", "--bench"], ["--check", "--bench"]),
        (["--root", "{T}/nowhere"], ["nowhere", "docs/"]),
        (["-j", "0"], ["-j", "integer >= 1"]),
    ],
)
def test_bad_arguments_are_one_error_line(tmp_path, args, words):
    (tmp_path / "docs").mkdir()
    argv = ["report", "--root", str(tmp_path)] + [a.replace("{T}", str(tmp_path)) for a in args]
    code, out, err = run_in_process(tmp_path, argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (code, out, err)
    assert all(w in lines[0] for w in words), lines[0]
