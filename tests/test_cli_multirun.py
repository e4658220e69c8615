"""The `decodelab` command with a tracker that cannot be reached, with tracking off, and as Hydra
multiruns (basic and joblib launchers): parent and child MLflow runs, a bad job never stops a
sweep."""

from __future__ import annotations

from itertools import product

import pytest
from conftest import (
    DEAD_SERVER,
    FAIL_FAST,
    OK_FILES,
    ROOT,  # noqa: F401
    SWEEP_HARDWARE,
    SWEEP_MODELS,
    all_runs,
    artifact_names,
    db_path,
    decodelab,
    job_dirs,
    read_result,
    run_dirs,
    split_sweep,
    the_run_dir,
)
from decodelab.core import kernel as K  # noqa: F401

# MLflow's SQLAlchemy store, read back in this process, warns about its own ORM usage.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning"),
    pytest.mark.slow,
]


# --------------------------------------------------------------------------- tracking failures


def test_unreachable_tracking_server_keeps_result(tmp_path):
    res = decodelab(tmp_path, "tracking=server", f"tracking.uri={DEAD_SERVER}", env=FAIL_FAST)
    assert res.rc == 0, res.explain()
    assert "TPOT" in res.out
    assert "MLflow tracking failed" in res.text
    assert "Traceback" not in res.text
    assert res.seconds < 120, f"took {res.seconds:.0f} s: the dead tracker was retried"
    d = the_run_dir(tmp_path)
    assert read_result(d)["status"] == "ok"
    assert (d / "steps.csv").is_file()
    assert not (d / "mlflow_run_id").exists()
    assert not db_path(tmp_path).exists()


def test_unreachable_tracking_server_in_a_sweep(tmp_path):
    res = decodelab(
        tmp_path,
        "-m",
        "tracking=server",
        f"tracking.uri={DEAD_SERVER}",
        "model=llama3_2_1b,llama3_2_3b",
        "quiet=true",
        env=FAIL_FAST,
    )
    assert res.rc == 0, res.explain()
    dirs = job_dirs(tmp_path)
    assert len(dirs) == 2
    for d in dirs:
        assert read_result(d)["status"] == "ok"
        assert not (d / "mlflow_run_id").exists()
    assert not list((tmp_path / "outputs" / "multirun").glob("*/*/mlflow_parent_run_id"))


def test_tracking_off(tmp_path):
    res = decodelab(tmp_path, "tracking=off", "quiet=true")
    assert res.rc == 0, res.explain()
    assert "TPOT" not in res.out  # quiet: no table
    d = the_run_dir(tmp_path)
    assert read_result(d)["status"] == "ok"
    assert not (d / "mlflow_run_id").exists()
    assert not db_path(tmp_path).exists()


# --------------------------------------------------------------------------- multirun


@pytest.mark.slow
def test_joblib_multirun_parent_and_children(joblib_sweep):
    cwd, res = joblib_sweep
    assert "Joblib.Parallel" in res.text and "is launching 6 jobs" in res.text
    assert "Traceback" not in res.text
    runs = all_runs(cwd)
    parents, children = split_sweep(runs)
    assert len(parents) == 1, [r.info.run_name for r in parents]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in parent.data.tags
    assert parent.data.tags["mlflow.source.git.commit"]
    assert "model=" + ",".join(SWEEP_MODELS) in parent.data.tags["overrides"]
    assert len(children) == 6, len(children)
    assert {c.data.tags.get("mlflow.parentRunId") for c in children} == {parent.info.run_id}
    pairs = [(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children]
    assert len(set(pairs)) == 6, sorted(pairs)
    assert set(pairs) == set(product(SWEEP_MODELS, SWEEP_HARDWARE))
    by_pair = {p: c for p, c in zip(pairs, children)}
    for c in children:
        assert c.info.status == "FINISHED"
        assert c.data.tags["status"] in ("ok", "infeasible"), c.data.tags
        if c.data.tags["status"] == "infeasible":
            assert c.data.tags["reason"]
        else:
            assert c.data.metrics["tpot_ms"] > 0
    assert by_pair[("llama3_1_8b", "h100_sxm")].data.tags["status"] == "ok"
    bad = by_pair[("llama3_1_70b", "h100_sxm")].data.tags
    assert bad["status"] == "infeasible" and "memory" in bad["reason"]
    # every job directory holds its result and the id of its MLflow child run
    dirs = job_dirs(cwd)
    assert len(dirs) == 6
    ids = {d.joinpath("mlflow_run_id").read_text().strip() for d in dirs}
    assert ids == {c.info.run_id for c in children}
    for d in dirs:
        assert read_result(d)["status"] in ("ok", "infeasible")
    (sweep_dir,) = {d.parent for d in dirs}
    assert (sweep_dir / "mlflow_parent_run_id").read_text().strip() == parent.info.run_id
    # the parent's summary metrics, from the jobs' results
    m = parent.data.metrics
    ok = [c for c in children if c.data.tags["status"] == "ok"]
    assert m["n_designs"] == 6 and m["n_ok"] == len(ok) and m["n_infeasible"] == 6 - len(ok)
    assert m["best_tok_s_aggregate"] == pytest.approx(max(c.data.metrics["tok_s_aggregate"] for c in ok))
    assert m["best_tpot_ms"] == pytest.approx(min(c.data.metrics["tpot_ms"] for c in ok))


def test_basic_launcher_multirun(tmp_path):
    res = decodelab(tmp_path, "-m", "model=llama3_2_1b,llama3_1_8b", "workload.batch_size=4", "quiet=true")
    assert res.rc == 0, res.explain()
    assert "Launching 2 jobs locally" in res.text
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and len(children) == 2
    assert parents[0].info.status == "FINISHED"
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert sorted(c.data.params["model.name"] for c in children) == ["llama3_1_8b", "llama3_2_1b"]
    assert all(c.data.params["workload.batch_size"] == "4" for c in children)
    assert all(c.data.tags["status"] == "ok" for c in children)
    assert all(OK_FILES <= artifact_names(tmp_path, c.info.run_id) for c in children)
    assert not run_dirs(tmp_path)  # a multirun writes under outputs/multirun only


def test_invalid_job_does_not_stop_a_sweep(tmp_path):
    res = decodelab(tmp_path, "-m", "model=llama3_2_1b", "workload.output_len=1,8", "quiet=true")
    assert res.rc == 0, res.explain()
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    status = {c.data.params["workload.output_len"]: c.data.tags for c in children}
    assert status["8"]["status"] == "ok"
    assert status["1"]["status"] == "invalid" and "workload.output_len" in status["1"]["reason"]
