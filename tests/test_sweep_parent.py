"""The parent run of a `decodelab -m` multirun: named after its sweep, with summary metrics,
the table and plots; the multirun's last lines say where its results are."""

from __future__ import annotations

import pytest
from conftest import all_runs, artifact_names, cli, explain, split_sweep

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.mark.slow
def test_multirun_parent_is_named_summarised_and_said(tmp_path):
    r = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=1,2", "quiet=true")
    assert r.returncode == 0, explain(r)
    (parent,), children = split_sweep(all_runs(tmp_path))
    assert parent.info.run_name == "sweep batch_size" and parent.info.status == "FINISHED"
    m = parent.data.metrics
    assert (m["n_ok"], m["n_infeasible"], m["n_invalid"], m["n_designs"]) == (2, 0, 0, 2)
    tpot = sorted(c.data.metrics["tpot_ms"] for c in children)
    assert m["best_tpot_ms"] == pytest.approx(tpot[0])
    assert m["median_tpot_ms"] == pytest.approx(sum(tpot) / 2)
    assert {"results.parquet", "pareto.png"} <= artifact_names(tmp_path, parent.info.run_id)
    last = r.stdout.strip().splitlines()[-3:]
    assert last[0].startswith("results: ") and last[0].endswith("results.parquet"), last
    assert last[1].startswith("MLflow: ") and parent.info.run_id in last[1], last
    assert last[2].startswith("view: "), last
