"""Resume that never lies (issue 16) and the sweep's results table, against a real SQLite MLflow
store: a code-version change recomputes; a new sweep that reuses stored designs still lists
all of them (table, result.json, links under its own parent); an interrupted sweep resumes to
exactly N designs; a user's models sweep through hydra.searchpath; a real local Dask cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, cli, explain, mlflow_client, runs_in, searchpath, split_sweep
from decodelab.api import load_results
from decodelab.output.table import read_table

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
    pytest.mark.slow,
]
USER_CONF = ROOT / "examples" / "user_conf"
# 2 models x 3 batches = 6 designs on one H100; batch 1024 does not fit (2 infeasible)
DESIGNS = ["model=llama3_2_1b,llama3_1_8b", "hardware=h100_sxm", "workload.batch_size=1,16,1024"]
N = 6


def uri(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'store' / 'mlflow.db'}"


def sweep(tmp: Path, name: str, extra=(), **kw):
    from decodelab.config.plan import make_plan
    from decodelab.runs.sweep import run_sweep

    args = [
        f"hydra.sweep.dir={tmp / name}",
        f"tracking.uri={uri(tmp)}",
        f"tracking.artifact_root={tmp / 'art'}",
        *DESIGNS,
        *extra,
    ]
    plan = make_plan(None, args)
    return plan, run_sweep(plan, jobs=1, progress=False, **kw)


@pytest.fixture
def code_version(monkeypatch):
    """Set the code version the config hash includes (as a change to the model code would)."""
    import decodelab.core.result as R

    monkeypatch.setattr(R, "_CODE_VERSION", [""])  # restored after the test

    def set_version(v: str) -> None:
        R._CODE_VERSION[0] = v

    return set_version


def parent_of(tmp: Path, sweep_dir: Path):
    pid = (sweep_dir / "mlflow_parent_run_id").read_text().strip()
    parents, children = split_sweep(runs_in(uri(tmp)))
    (p,) = [r for r in parents if r.info.run_id == pid]
    return p, [c for c in children if c.data.tags.get("mlflow.parentRunId") == pid]


def test_new_sweep_lists_reused_designs_and_code_change_recomputes(tmp_path, code_version):
    code_version("0.0-test+aaaa")
    plan, first = sweep(tmp_path, "s1")
    c = first.counts()
    assert (c["ok"], c["infeasible"], c["reused"]) == (4, 2, 0)
    t1 = load_results(first.sweep_dir)
    assert len(t1) == N and list(t1.job) == list(range(N)) and (t1.code_version == "0.0-test+aaaa").all()
    inf = t1[t1.status == "infeasible"]  # infeasible designs stay in the table with their reason
    assert len(inf) == 2 and inf.reason.str.startswith("does not fit memory").all()
    p1, kids1 = parent_of(tmp_path, first.sweep_dir)
    assert len(kids1) == 4  # default: the Pareto front and the top 10 (of the ok designs)
    assert p1.data.metrics["n_ok"] == 4 and p1.data.metrics["n_infeasible"] == 2
    assert p1.data.metrics["n_pareto"] >= 1 and "best_design" in p1.data.tags

    # the same sweep again, in a new directory: nothing evaluated, everything listed
    _, again = sweep(tmp_path, "s2")
    assert again.counts()["reused"] == N and not again.evaluated
    t2 = load_results(again.sweep_dir)
    assert len(t2) == N and (t2.reused_from != "").all()
    assert list(t2.config_hash) == list(t1.config_hash)
    assert t2.tpot_ms.tolist() == pytest.approx(t1.tpot_ms.tolist(), nan_ok=True)
    for d in (again.sweep_dir / str(i) for i in range(N)):  # every design has its result.json
        rec = json.loads((d / "result.json").read_text())
        assert rec["reused_from"] and (d / "mlflow_run_id").read_text() == rec["reused_from"]
    p2, kids2 = parent_of(tmp_path, again.sweep_dir)
    assert p2.info.run_id != p1.info.run_id and p2.data.metrics["n_reused"] == N
    assert len(kids2) == len(kids1)  # the same best designs, as links to the originals
    assert all(k.data.tags["reused"] == "true" and k.data.tags["reused_from"] for k in kids2)
    table = Path(p2.info.artifact_uri.removeprefix("file://")) / "results.parquet"
    assert len(read_table(table)) == N  # the parent's table lists all its designs
    old_ids = {r.info.run_id for r in runs_in(uri(tmp_path))}
    assert set(t2.reused_from) <= old_ids

    # the model code changed: the same designs have new hashes, so all are evaluated again
    code_version("0.0-test+bbbb")
    _, changed = sweep(tmp_path, "s3")
    assert changed.counts()["reused"] == 0 and len(changed.evaluated) == N
    t3 = load_results(changed.sweep_dir)
    assert (t3.code_version == "0.0-test+bbbb").all() and not set(t3.config_hash) & set(t1.config_hash)


def test_interrupted_sweep_resumes_to_exactly_n(tmp_path, monkeypatch):
    """A sweep stopped after 5 designs (as by Ctrl-C), run again in the same directory: the
    table has exactly the N designs once, the reused ones are not evaluated again, and no
    design has two runs."""
    import decodelab.runs.sweep as S

    real, calls = S._slim, []

    def stop_after_5(full):
        calls.append(1)
        if len(calls) > 5:
            raise KeyboardInterrupt
        return real(full)

    monkeypatch.setattr(S, "_slim", stop_after_5)
    _, first = sweep(tmp_path, "s", children="all")
    assert first.interrupted and len(first.records) == 5
    assert len(read_table(first.table)) == 5
    done = len(split_sweep(runs_in(uri(tmp_path)))[1])  # the 6th was recorded when stopped
    assert done in (5, 6)
    monkeypatch.setattr(S, "_slim", real)
    _, again = sweep(tmp_path, "s", children="all")
    assert not again.interrupted and again.counts()["reused"] == done and len(again.evaluated) == N - done
    t = load_results(again.sweep_dir)
    assert list(t.job) == list(range(N)) and t.config_hash.nunique() == N
    parents, children = split_sweep(runs_in(uri(tmp_path)))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == N and len({c.data.tags["config_hash"] for c in children}) == N


def test_searchpath_models_sweep(tmp_path):
    """A user's model and chip from their own config dir: through hydra.searchpath on the
    command line, and through the searchpath of a sweep file of their own."""
    from decodelab.config.plan import make_plan
    from decodelab.runs.sweep import run_sweep

    study = tmp_path / "study.yaml"
    study.write_text(
        "defaults:\n  - config\n  - _self_\n"
        f"hydra:\n  searchpath:\n    - file://{USER_CONF}\n"
        "  sweeper:\n    params:\n      workload.batch_size: 1,2\n"
    )
    for target, extra in ((None, [searchpath(USER_CONF)]), (str(study), [])):
        plan = make_plan(
            target,
            [
                f"hydra.sweep.dir={tmp_path / 'sw'}",
                "tracking=off",
                "model=my_model,llama3_1_8b",
                "hardware=my_chip",
            ]
            + extra,
        )
        out = run_sweep(plan, jobs=1, progress=False)
        t = load_results(out.sweep_dir)
        assert out.counts()["ok"] == len(t) == (4 if target else 2)
        assert set(t["model.name"]) == {"my_model", "llama3_1_8b"} and set(t["hardware.name"]) == {"my_chip"}


def test_multirun_after_a_single_run_lists_all_its_jobs(tmp_path):
    """The README's order: a single run, then a multirun that includes that design. The
    multirun's parent has a child for each of its jobs (the recorded one as a link), and every
    job directory has its result.json."""
    one = cli(tmp_path, "model=llama3_2_1b", "tracking.background=false", "quiet=true")
    assert one.returncode == 0, explain(one)
    m = cli(tmp_path, "-m", "model=llama3_2_1b,qwen2_5_0_5b", "quiet=true")
    assert m.returncode == 0, explain(m)
    c = tmp_path / "outputs" / "mlflow.db"
    parents, children = split_sweep(runs_in(f"sqlite:///{c}"))
    (p,) = parents
    under = [k for k in children if k.data.tags.get("mlflow.parentRunId") == p.info.run_id]
    assert len(under) == 2
    (link,) = [k for k in under if k.data.tags.get("reused") == "true"]
    (single,) = [k for k in children if "mlflow.parentRunId" not in k.data.tags]
    assert link.data.tags["reused_from"] == single.info.run_id
    assert link.data.tags["reused_config_hash"] == single.data.tags["config_hash"]
    jobs = sorted((tmp_path / "outputs" / "multirun").glob("*/*/[0-9]*"))
    assert len(jobs) == 2 and all((j / "result.json").is_file() for j in jobs)
    t = load_results(jobs[0].parent)  # the multirun's results.parquet, also on its parent run
    assert list(t.job) == [0, 1] and (t.reused_from != "").sum() == 1
    assert "results.parquet" in {
        a.path for a in mlflow_client(f"sqlite:///{c}").list_artifacts(p.info.run_id)
    }


def test_sweep_on_a_local_dask_cluster(tmp_path):
    """`--backend dask --address`: a real local Dask cluster (one worker) runs a small sweep."""
    distributed = pytest.importorskip(
        "dask.distributed", reason="the dask extra is not installed (pip install 'decodelab[dask]')"
    )
    from decodelab.config.plan import make_plan
    from decodelab.runs.sweep import run_sweep

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as lc:
        plan = make_plan(None, [f"hydra.sweep.dir={tmp_path / 'sw'}", "tracking=off", *DESIGNS])
        out = run_sweep(plan, jobs=1, progress=False, backend="dask", address=lc.scheduler_address)
    assert "Dask" in out.backend
    t = load_results(out.sweep_dir)
    assert list(t.job) == list(range(N)) and (t.status == "ok").sum() == 4
    local = make_plan(None, [f"hydra.sweep.dir={tmp_path / 'local'}", "tracking=off", *DESIGNS])
    ref = load_results(run_sweep(local, jobs=1, progress=False).sweep_dir)
    assert t.tpot_ms.tolist() == pytest.approx(ref.tpot_ms.tolist(), rel=1e-12, nan_ok=True)


def test_bad_backend_address_is_one_line(tmp_path):
    pytest.importorskip("dask.distributed", reason="the dask extra is not installed")
    r = cli(
        tmp_path, "sweep", "tracking=off", "--backend", "dask", "--address", "tcp://127.0.0.1:9", timeout=120
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, explain(r)
    assert r.stderr.startswith("error: --address tcp://127.0.0.1:9: cannot connect"), r.stderr
