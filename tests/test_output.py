"""What a user reads (issue 18's output items), through the real entry point in this process at
80 columns: where the results went, the legend of the two rows nobody can read off, an
infeasible run's reason, notes once, no inapplicable-default note on SN40L, batch_fill labelled by
the batch simulated, names whole in the sweep and compare tables, compare bounded and writing no
file, the CoE headline latency in the table, and the plots' pixel sizes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import read_result, run_dirs, run_in_process, runs_in, the_run_dir

NARROW = 80


def run80(cwd: Path, *argv: str):
    code, out, err = run_in_process(cwd, list(argv), columns=NARROW)
    assert "Traceback" not in out + err, out + err
    return code, out, err


@pytest.mark.slow
def test_table_says_where_results_went_and_explains_its_rows(tmp_path):
    code, out, err = run80(tmp_path, "model=llama3_2_1b")
    assert code == 0, out + err
    d = the_run_dir(tmp_path)
    assert f"results: {d}" in out
    assert "MLflow:  sqlite:///outputs/mlflow.db, experiment 'decodelab'" in out
    assert "mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db" in out
    assert re.search(r"^% of roofline \(Eq\. 3\): .*HBM bound", out, re.M), out
    assert re.search(r"^TPOT excess: ", out, re.M), out
    legend_and_table = [ln for ln in out.splitlines() if not ln.startswith(("results:", "MLflow:", "view:"))]
    assert max(len(line) for line in legend_and_table) <= NARROW  # paths may be longer


def test_infeasible_run_prints_its_reason(tmp_path):
    code, out, _ = run80(tmp_path, "model=llama3_1_70b", "hardware=h100_sxm", "tracking=off")
    assert code == 0
    reason = read_result(the_run_dir(tmp_path))["reason"]
    assert reason and "memory" in reason
    assert " ".join(reason.split()) in " ".join(out.split())  # the whole reason, wrapped at 80


@pytest.mark.slow
def test_sn40l_default_has_no_cuda_graphs_note_but_a_request_does(tmp_path):
    code, out, _ = run80(tmp_path, "hardware=sn40l_node8", "model=llama3_2_1b", "tracking=off")
    assert code == 0 and "cuda_graphs" not in out
    code, out, _ = run80(
        tmp_path, "hardware=sn40l_node8", "model=llama3_2_1b", "optimizations=all", "tracking=off"
    )
    assert code == 0 and out.count("cuda_graphs does not apply") == 1


def test_speculative_notes_print_once(tmp_path):
    """Target and draft both carry the all-profile's cuda_graphs note on SN40L: printed once."""
    code, out, _ = run80(
        tmp_path,
        "speculative=draft",
        "model=llama3_1_70b",
        "hardware=sn40l_node8",
        "optimizations=all",
        "tracking=off",
    )
    assert code == 0, out
    notes = [ln for ln in out.splitlines() if ln.startswith("note: ")]
    assert notes and len(notes) == len(set(notes)), notes
    rec = read_result(the_run_dir(tmp_path))
    assert len(rec["notes"]) == len(set(rec["notes"])), rec["notes"]


@pytest.mark.slow
def test_batch_fill_is_labelled_by_the_batch_simulated(tmp_path):
    code, out, err = run80(tmp_path, "model=llama3_2_1b", "workload.batch_fill=true")
    assert code == 0, out + err
    rec = read_result(the_run_dir(tmp_path))
    b = int(rec["metrics"]["batch_size"])
    assert b > 1 and rec["config"]["workload"]["batch_size"] == 1
    assert f"b{b} fill 4096+128" in out and "| b1 " not in out
    (run,) = runs_in(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    assert f"| b{b} fill " in run.info.run_name
    assert run.data.params["workload.batch_size"] == str(b)
    assert run.data.params["workload.batch_fill"] == "True"


def test_coe_table_shows_its_headline_latency(tmp_path):
    code, out, _ = run80(tmp_path, "coe=samba_coe", "hardware=sn40l_node8", "tracking=off")
    assert code == 0, out
    m = read_result(the_run_dir(tmp_path))["metrics"]
    first = [ln for ln in out.splitlines() if "│" in ln][0]
    assert "CoE latency per batch" in first and f"{m['coe_latency_ms']:.1f} ms" in first, out


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """A 12-design sweep (three models, two chips, two batches) in a SQLite store, every design a
    child run (`--children all`: compare lists runs)."""
    cwd = tmp_path_factory.mktemp("store")
    code, out, err = run80(
        cwd,
        "sweep",
        "--children",
        "all",
        "model=llama3_1_8b,llama3_2_1b,llama3_1_70b",
        "hardware=h100_sxm,sn40l_node8",
        "workload.batch_size=1,8",
    )
    assert code == 0, out + err
    return cwd, out


@pytest.mark.slow
def test_sweep_top10_keeps_names_whole_at_80_columns(small_store):
    _, out = small_store
    assert "…" not in out
    table = out.split("feasible designs by aggregate tok/s", 1)[1]
    for name in ("llama3_1_70b", "llama3_2_1b", "sn40l_node8", "h100_sxm"):
        assert name in table, table
    assert max(len(line) for line in table.splitlines()) <= NARROW


@pytest.mark.slow
def test_compare_without_arguments_is_bounded_and_writes_nothing(small_store):
    cwd, _ = small_store
    before = sorted(p.name for p in cwd.iterdir())
    code, out, err = run80(cwd, "compare")
    assert code == 0, out + err
    assert sorted(p.name for p in cwd.iterdir()) == before  # no compare.csv
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= NARROW
    ids = re.findall(r"^([0-9a-f]{8}) ", out, re.M)
    assert len(ids) == 12  # every run, one row each, with its id
    assert "llama3_1_70b" in out and "infeasible" in out
    assert "tpot" in out and "roofline" in out  # the headline metrics
    code, out, _ = run80(cwd, "compare", "--max", "3")
    assert code == 0 and "the most recent 3 runs" in out and "more runs match" in out
    # what differs, side by side: which swept keys differ among the 3 most recent runs depends on
    # the order the sweep's runs finished in (the last three can share a chip, or a batch)
    assert any(k in out for k in ("workload.batch_size", "hardware.name", "model.name")), out


@pytest.mark.slow
def test_plots_have_sane_sizes(tmp_path):
    """breakdown.png of one run and of a 72-job claim sweep (C2's size): every label inside the
    image (tight bounding box), a width that does not grow with the number of bars."""
    from decodelab.output.files import breakdown_plot
    from PIL import Image

    code, out, _ = run80(tmp_path, "model=llama3_2_1b", "tracking=off")
    one = Image.open(the_run_dir(tmp_path) / "breakdown.png").size
    m = json.loads((run_dirs(tmp_path)[0] / "result.json").read_text())["metrics"]
    label = "model=llama3_1_70b hardware=sn40l_rack16 kernel_looping=false batch_size=16 prompt_len=8192"
    many = Image.open(breakdown_plot([m] * 72, [label] * 72, tmp_path / "c2.png")).size
    assert 600 <= one[0] <= 1600 and 150 <= one[1] <= 600, one
    assert 600 <= many[0] <= 1800 and 1200 <= many[1] <= 2600, many  # was 8,987 x 440 px


def test_latency_histogram_of_identical_requests():
    """Requests whose latencies agree to a few ulps (identical requests of a closed loop) get a 1 ms
    wide histogram range instead of numpy's "too many bins for data range"; any real spread keeps
    the data's own range."""
    import numpy as np
    from decodelab.output.serving import _hist_range

    x = 18.75
    v = np.array([x, np.nextafter(x, 20.0), np.nextafter(np.nextafter(x, 20.0), 20.0)])
    lo, hi = _hist_range(v)
    assert (lo, hi) == (x - 0.5, v[-1] + 0.5)
    np.histogram(v, bins=5, range=(lo, hi))  # does not raise
    assert _hist_range(np.array([10.0, 12.5, 11.0])) == (10.0, 12.5)
