"""The MLflow store under parallel writers and faults: real local writers (SQLite in a temporary
directory), each bounded in time.

- 4 processes (a fast sweep, a joblib multirun, two single runs) start together on a store that
  does not exist yet: every design is recorded exactly once (the store is created and migrated
  under a file lock, decodelab.tracking.store).
- `decodelab sync` twice, with --each, and after a writer died mid-run (a RUNNING run left
  behind): exactly one FINISHED run per design; MLflow's own artifact copies of result.json
  (outputs/mlartifacts) are never uploaded or marked.
- The same four writers into a local `mlflow server` (SQLite backend in tmp): every design once.
- A corrupted mlflow.db (not SQLite, or a valid SQLite header over garbage pages): the run still
  writes its result and says in one line which file is broken and what to do, within seconds (no
  minutes of retries); an out-of-date or foreign schema is one line too.
- A store is created in a temporary file and renamed into place: a migration that fails (a full
  disk, an interrupt) leaves nothing at the final path. Its files are 0600, a new artifact root
  0700; creation and sync take one FileLock (`<store>.lock`), a held one times out in one line.
- A new store is a copy of the empty migrated store kept in the cache (no migration run), with a
  migrated store's schema and Default experiment; a damaged or stale template is replaced; a cache
  that cannot be written still gives a store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MlflowServer, all_runs, cli, client, explain, free_port, runs_in, split_sweep

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]


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


def garbage_pages(db: Path) -> bytes:
    """An SQLite file whose header is valid and whose other pages are garbage."""
    import random
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x TEXT)")
    con.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    con.commit()
    con.close()
    data = bytearray(db.read_bytes())
    rnd = random.Random(0)
    data[4096:] = bytes(rnd.randrange(256) for _ in range(len(data) - 4096))
    return bytes(data)


@pytest.mark.parametrize("kind", ["not_sqlite", "garbage_pages"])
def test_corrupted_store_fails_fast_with_one_line(tmp_path, kind):
    db = tmp_path / "outputs" / "mlflow.db"
    db.parent.mkdir()
    if kind == "not_sqlite":
        db.write_bytes(b"this is not a database\n" * 100)
    else:
        db.write_bytes(garbage_pages(tmp_path / "template.db"))
    start_bytes = db.read_bytes()
    t0 = time.monotonic()
    r = cli(tmp_path, "model=llama3_2_1b", "tracking.background=false", timeout=300)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, explain(r)  # the result is on disk; the tracker is not
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if str(db) in ln]
    assert len(lines) == 1 and "mv " in lines[0] and "decodelab sync" in lines[0], explain(r)
    assert seconds < 60, seconds  # MLflow alone retried for ~100 s per call (300+ s in all)
    s = cli(tmp_path, "sync", timeout=300)
    assert s.returncode == 1 and str(db) in s.stdout, explain(s)
    assert db.read_bytes() == start_bytes  # left for the user to move


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


# --------------------------------------------------------------------------- the store's file


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """A real, fully migrated MLflow store (made once; tests copy it)."""
    from decodelab.tracking import local_store

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    local_store.create_store(db)
    return db


def test_garbage_pages_fail_within_seconds_naming_the_file(tmp_path):
    from decodelab.tracking import local_store
    from decodelab.tracking.sqlite import StoreError

    db = tmp_path / "mlflow.db"
    db.write_bytes(garbage_pages(tmp_path / "template.db"))
    t0 = time.monotonic()
    with pytest.raises(StoreError) as e:
        local_store.open_store(db)
    assert time.monotonic() - t0 < 10
    text = str(e.value)
    assert "\n" not in text and str(db) in text and "damaged" in text, text
    assert f"mv {db} {db}.broken" in text and "decodelab sync" in text, text


def test_a_check_that_hangs_is_cut_off(tmp_path, good_store, monkeypatch):
    import shutil

    from decodelab.tracking import sqlite
    from decodelab.tracking.sqlite import StoreError

    db = tmp_path / "mlflow.db"
    shutil.copy(good_store, db)
    monkeypatch.setattr(sqlite, "_quick_check", lambda path, out: time.sleep(30))
    monkeypatch.setenv("DECODELAB_STORE_CHECK_TIMEOUT", "0.5")
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="did not finish in 0 s") as e:
        sqlite.integrity(db)
    assert time.monotonic() - t0 < 5 and str(db) in str(e.value)


@pytest.mark.parametrize("version", ["stale", "newer", "missing"])
def test_a_store_at_another_schema_is_one_line(tmp_path, good_store, version):
    import shutil
    import sqlite3

    from decodelab.tracking import local_store
    from decodelab.tracking.sqlite import StoreError

    db = tmp_path / "mlflow.db"
    shutil.copy(good_store, db)
    con = sqlite3.connect(db)
    if version == "missing":
        con.execute("DROP TABLE alembic_version")
    else:  # MLflow's first migration, or one this MLflow does not know
        rev = "451aebb31d03" if version == "stale" else "ffffffffffff"
        con.execute("UPDATE alembic_version SET version_num = ?", (rev,))
    con.commit()
    con.close()
    with pytest.raises(StoreError) as e:
        local_store.open_store(db)
    text = str(e.value)
    assert "\n" not in text and str(db) in text, text
    expect = {"stale": f"mlflow db upgrade sqlite:///{db}", "newer": "newer MLflow", "missing": "mv "}
    assert expect[version] in text, text


def test_the_check_runs_once_per_file_version(tmp_path, good_store, monkeypatch):
    import shutil

    from decodelab.tracking import local_store

    db = tmp_path / "mlflow.db"
    shutil.copy(good_store, db)
    calls = []
    real = local_store.integrity
    monkeypatch.setattr(local_store, "integrity", lambda p: calls.append(p) or real(p))
    for _ in range(3):
        local_store.open_store(db)
    assert len(calls) == 1
    with open(db, "ab") as f:  # the file changed (size, mtime): checked again
        f.write(b"\0" * 4096)
    local_store.open_store(db)
    assert len(calls) == 2


@pytest.mark.parametrize("fault", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_an_interrupted_creation_leaves_no_store(tmp_path, monkeypatch, fault):
    import sqlite3

    from decodelab.tracking import local_store

    def half_migrate(tmp):  # some tables written, then the disk fills (or ^C)
        con = sqlite3.connect(tmp)
        con.execute("CREATE TABLE half_written (x)")
        con.commit()
        con.close()
        raise fault

    monkeypatch.setattr(local_store, "_migrate", half_migrate)
    db = tmp_path / "outputs" / "mlflow.db"
    with pytest.raises(type(fault)):
        local_store.open_store(db)
    assert not db.exists()
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db.lock"]  # no temporary file


def test_store_files_are_private(tmp_path):
    from decodelab.tracking import local_store, store

    old = os.umask(0o022)
    try:
        db = tmp_path / "outputs" / "mlflow.db"
        local_store.open_store(db)
        root = store._artifact_root(str(tmp_path / "outputs" / "mlartifacts"))
    finally:
        os.umask(old)
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(db) == 0o600 and mode(db.with_name("mlflow.db.lock")) == 0o600
    assert mode(tmp_path / "outputs" / "mlartifacts") == 0o700 and root.startswith("file://")


def hold_lock(uri: str) -> subprocess.Popen:
    """Another process holding the store's lock through `decodelab sync`'s own lock."""
    code = (
        "import sys, time\n"
        "from decodelab.tracking.sync import _store_lock\n"
        f"with _store_lock({uri!r}):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_creation_and_sync_share_one_lock_that_times_out(tmp_path, monkeypatch):
    """Another process in `decodelab sync` holds the store's lock: creating the store and a
    second sync each give up after LOCK_WAIT_S with one line naming `<store>.lock`."""
    import json

    from decodelab.tracking import local_store, sqlite, sync
    from decodelab.tracking.sqlite import StoreError

    db = tmp_path / "outputs" / "mlflow.db"
    job = tmp_path / "outputs" / "runs" / "job"
    job.mkdir(parents=True)
    record = {"status": "ok", "reason": "", "notes": [], "metrics": {}}
    record["config"] = {"tracking": {"uri": f"sqlite:///{db}"}}
    (job / "result.json").write_text(json.dumps(record))
    holder = hold_lock(f"sqlite:///{db}")
    try:
        monkeypatch.setattr(sqlite, "LOCK_WAIT_S", 1.0)
        t0 = time.monotonic()
        with pytest.raises(StoreError) as e:
            local_store.open_store(db)
        rep = sync.sync([job])
        assert time.monotonic() - t0 < 10
        assert rep.failed == 1 and len(rep.errors) == 1 and not db.exists()
        for text in (str(e.value), rep.errors[0]):
            assert "\n" not in text and f"{db}.lock" in text and "held this store's lock for 1 s" in text
    finally:
        holder.kill()
        holder.wait()
    local_store.open_store(db)  # the lock is free again: the store is made
    assert db.is_file()


def test_no_other_file_lock_guards_the_store():
    root = Path(__file__).resolve().parent.parent / "framework" / "tracking"
    for f in root.rglob("*.py"):
        text = f.read_text()
        assert "fcntl" not in text and "flock(" not in text, f


def _schema(db: Path) -> tuple:
    """(alembic version, every table's and index's SQL, the experiments' rows) of a store."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        version = con.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        sql = sorted(r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
        experiments = con.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
    finally:
        con.close()
    return version, sql, experiments


def test_a_new_store_starts_from_the_kept_template(tmp_path, monkeypatch):
    """The first store an MLflow migrates is kept, its Default experiment left out; a later new
    store is a copy of it that MLflow completes with the Default experiment, without running a
    migration: the same schema, and Default where this working directory puts it."""
    import mlflow.store.db.utils as db_utils

    from decodelab.tracking import local_store

    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    migrated = tmp_path / "a" / "mlflow.db"
    local_store.open_store(migrated)
    tpl = local_store.template_path()
    assert tpl.parent == tmp_path / "cache" / "mlflow-stores"
    version, sql, experiments = _schema(tpl)
    assert version == local_store.schema_head() and experiments == []

    def no_migration(engine):
        raise AssertionError("a store made from the template ran MLflow's migrations")

    monkeypatch.setattr(db_utils, "_initialize_tables", no_migration)
    copied = tmp_path / "b" / "mlflow.db"
    local_store.open_store(copied)
    assert _schema(copied) == _schema(migrated)
    assert _schema(copied)[2] == [(0, "Default", str(tmp_path / "mlruns" / "0"))]
    assert oct(copied.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("bad", ["garbage", "stale"])
def test_a_template_that_is_not_sound_is_replaced(tmp_path, monkeypatch, good_store, bad):
    import shutil
    import sqlite3

    from decodelab.tracking import local_store

    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    tpl = local_store.template_path()
    tpl.parent.mkdir(parents=True)
    if bad == "garbage":
        tpl.write_bytes(garbage_pages(tmp_path / "garbage.db"))
    else:  # a store at another schema under this MLflow's name
        shutil.copy(good_store, tpl)
        con = sqlite3.connect(tpl)
        con.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")
        con.commit()
        con.close()
    db = tmp_path / "outputs" / "mlflow.db"
    local_store.open_store(db)  # migrated, not copied
    assert _schema(db)[0] == local_store.schema_head()
    assert _schema(tpl)[0] == local_store.schema_head() and _schema(tpl)[2] == []


def test_a_cache_that_cannot_be_written_still_gives_a_store(tmp_path, monkeypatch):
    from decodelab.tracking import local_store

    (tmp_path / "cache").write_text("a file where the cache directory would be")
    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "outputs" / "mlflow.db"
    local_store.open_store(db)
    assert _schema(db)[0] == local_store.schema_head()
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db", "mlflow.db.lock"]
