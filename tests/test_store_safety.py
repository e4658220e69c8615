"""The MLflow store under parallel writers and faults: real local writers (SQLite in a temporary
directory), each bounded in time.

- 4 processes (a fast sweep, a joblib multirun, two single runs) start together on a store that
  does not exist yet: every design is recorded exactly once (the store is created and migrated
  under a file lock, decodelab.tracking.store).
- `decodelab sync` twice, with --each, and after a writer died mid-run (a RUNNING run left
  behind): exactly one FINISHED run per design; MLflow's own artifact copies of result.json
  (outputs/mlartifacts) are never uploaded or marked.
- The same four writers into a local `mlflow server` (SQLite backend in tmp): every design once.
- A corrupted mlflow.db: the run still writes its result and says in one line which file is
  broken and what to do, within seconds (no minutes of retries)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MlflowServer, all_runs, cli, client, explain, free_port, runs_in, split_sweep

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def start(cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "200"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "decodelab.apps.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished_by_hash(cwd: Path) -> dict:
    out: dict = {}
    for r in split_sweep(all_runs(cwd))[1]:
        out.setdefault(r.data.tags["config_hash"], []).append(r.info.status)
    return out


def test_four_parallel_writers_into_a_new_store(tmp_path):
    procs = [
        start(tmp_path, "sweep", "model=llama3_2_1b", "workload.batch_size=1,2,3,4,5", "-j", "1", "-q"),
        start(
            tmp_path,
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            "model=llama3_2_3b",
            "workload.batch_size=1,2,3",
            "quiet=true",
        ),
        start(tmp_path, "model=qwen2_5_0_5b", "quiet=true"),
        start(tmp_path, "model=smollm2_135m", "quiet=true"),
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "WARNING" not in err and "warning" not in out, f"{out}\n{err}"
    by_hash = finished_by_hash(tmp_path)
    assert len(by_hash) == 5 + 3 + 1 + 1, by_hash  # every design recorded
    assert all(v == ["FINISHED"] for v in by_hash.values()), by_hash  # exactly once


@pytest.mark.slow
def test_four_parallel_writers_into_a_tracking_server(tmp_path):
    """The same four kinds of writer, started together against a local `mlflow server` (SQLite
    backend in tmp, a free port): every design recorded exactly once, the sweeps' parents with
    their summary metrics. Few designs: the writers' concurrency is the point."""
    server = MlflowServer(tmp_path, free_port()).start()
    try:
        uri = f"tracking.uri={server.uri}"
        procs = [
            start(tmp_path, "sweep", "model=llama3_2_1b", "workload.batch_size=1,2,3", uri, "-j", "1", "-q"),
            start(
                tmp_path,
                "-m",
                "hydra/launcher=joblib",
                "hydra.launcher.n_jobs=2",
                "model=llama3_2_3b",
                "workload.batch_size=1,2",
                uri,
                "quiet=true",
            ),
            start(tmp_path, "model=qwen2_5_0_5b", uri, "quiet=true"),
            start(tmp_path, "model=smollm2_135m", uri, "quiet=true"),
        ]
        outs = [p.communicate(timeout=600) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0 and "WARNING" not in err and "warning" not in out, f"{out}\n{err}"
        runs = runs_in(server.uri)
    finally:
        server.kill()
    parents, children = split_sweep(runs)
    by_hash: dict = {}
    for r in children:
        by_hash.setdefault(r.data.tags["config_hash"], []).append(r.info.status)
    assert len(by_hash) == 3 + 2 + 1 + 1, by_hash  # every design recorded
    assert all(v == ["FINISHED"] for v in by_hash.values()), by_hash  # exactly once
    assert sorted(p.data.metrics["n_ok"] for p in parents) == [2.0, 3.0]  # -m and sweep parents
    assert all(p.info.status == "FINISHED" and p.data.metrics["best_tpot_ms"] > 0 for p in parents)


def test_sync_is_idempotent_and_ignores_mlflow_artifact_copies(tmp_path):
    r = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=1,2,3", "quiet=true")
    assert r.returncode == 0, explain(r)
    copies = list((tmp_path / "outputs" / "mlartifacts").rglob("result.json"))
    assert len(copies) == 3  # MLflow's own copies, beside the run directories' originals
    for args in (["sync"], ["sync"], ["sync", "--each"]):
        s = cli(tmp_path, *args)
        assert s.returncode == 0 and "0 uploaded" in s.stdout, explain(s)
    assert not list((tmp_path / "outputs" / "mlartifacts").rglob("mlflow_run_id"))

    # a writer killed mid-run: its run left RUNNING, its result unmarked
    job = sorted((tmp_path / "outputs" / "multirun").glob("*/*/0"))[0]
    (job / "mlflow_run_id").unlink()
    c = client(tmp_path)
    exp = c.get_experiment_by_name("decodelab").experiment_id
    import json

    h = json.loads((job / "result.json").read_text())["config_hash"]
    c.delete_run(next(r.info.run_id for r in all_runs(tmp_path) if r.data.tags.get("config_hash") == h))
    c.create_run(exp, run_name="killed", tags={"config_hash": h})
    s = cli(tmp_path, "sync")
    assert s.returncode == 0 and "1 uploaded" in s.stdout and "1 unfinished runs replaced" in s.stdout, (
        explain(s)
    )
    by_hash = finished_by_hash(tmp_path)
    assert len(by_hash) == 3 and all(v == ["FINISHED"] for v in by_hash.values()), by_hash


def test_sync_leaves_a_killed_parent_killed(tmp_path):
    r = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=1,2", "quiet=true")
    assert r.returncode == 0, explain(r)
    c = client(tmp_path)
    parent = split_sweep(all_runs(tmp_path))[0][0].info.run_id
    c.set_terminated(parent, status="KILLED")
    job = sorted((tmp_path / "outputs" / "multirun").glob("*/*/1"))[0]
    (job / "mlflow_run_id").unlink()
    s = cli(tmp_path, "sync")
    assert s.returncode == 0, explain(s)
    assert c.get_run(parent).info.status == "KILLED"


def test_corrupted_store_fails_fast_with_one_line(tmp_path):
    db = tmp_path / "outputs" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(b"this is not a database\n" * 100)
    t0 = time.monotonic()
    r = cli(tmp_path, "model=llama3_2_1b", "tracking.background=false", timeout=300)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, explain(r)  # the result is on disk; the tracker is not
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if str(db) in ln]
    assert len(lines) == 1 and "mv " in lines[0] and "decodelab sync" in lines[0], explain(r)
    assert seconds < 120, seconds  # MLflow alone retried for ~100 s per call
    s = cli(tmp_path, "sync", timeout=300)
    assert s.returncode == 1 and str(db) in s.stdout, explain(s)
    assert db.read_bytes().startswith(b"this is not")  # left for the user to move


def test_result_json_is_never_left_empty(tmp_path, monkeypatch):
    """A write that fails (a full disk) leaves the previous result.json, and no temporary file."""
    import errno

    from decodelab.output import files

    path = tmp_path / "result.json"
    files.write_atomic(path, '{"status": "ok"}')
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda p, *a, **k: Full(real_open(p, *a, **k)))
    with pytest.raises(OSError):
        files.write_atomic(path, '{"status": "infeasible"}')
    monkeypatch.undo()
    assert path.read_text() == '{"status": "ok"}'
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
