"""Sweeps at scale (issue 7): the fast sweep path, resuming, sync, compare and search, against a
real MLflow store (SQLite in a temporary directory, or a real `mlflow server` on 127.0.0.1).
Nothing is mocked; stores are read back with MlflowClient.

Speed targets are benchmarks (`pytest -m benchmark`, skipped by the default run; they report
their figures and never fail on a slow machine): 1,000 designs with MLflow logging, and the cold
start of `decodelab`. The hypothesis test runs a few hundred configs in CI and
10,000 with DECODELAB_NIGHTLY=1.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MlflowServer, cli, explain, free_port, mlflow_client, runs_in, split_sweep
from decodelab.api import load_results

ROOT = Path(__file__).resolve().parents[1]
FAIL_FAST = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
    pytest.mark.slow,
]


# --------------------------------------------------------------------------- helpers


def client(uri: str):
    return mlflow_client(uri)


def runs(uri: str, experiment: str = "decodelab"):
    return runs_in(uri, experiment)


def split(all_runs):
    return split_sweep(all_runs)


def sqlite_uri(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'store' / 'mlflow.db'}"


def tracking_args(tmp: Path, uri: str | None = None):
    return [f"tracking.uri={uri or sqlite_uri(tmp)}", f"tracking.artifact_root={tmp / 'art'}"]


def sweep(tmp: Path, overrides, jobs: int = 1, target=None, children="all", sweep_dir="sweep", **kw):
    """make_plan + run_sweep in this process (workers are processes when jobs > 1)."""
    from decodelab.config.plan import make_plan
    from decodelab.runs.sweep import run_sweep

    plan = make_plan(target, [f"hydra.sweep.dir={tmp / sweep_dir}"] + list(overrides))
    return plan, run_sweep(plan, jobs=jobs, progress=False, children=children, **kw)


def result_dirs(sweep_dir: Path):
    return sorted((p.parent for p in sweep_dir.glob("*/result.json")), key=lambda d: int(d.name))


# --------------------------------------------------------------------------- the fast path


def test_fast_sweep_gives_the_jobs_and_results_of_hydra_multirun(tmp_path):
    """`decodelab sweep` = `decodelab -m` with the same overrides: same job numbers, configs,
    config hashes and metrics, from a sweep file plus command-line sweeps."""
    args = ["model=llama3_2_1b,llama3_1_8b", "workload.batch_size=1,8", "tracking=off", "quiet=true"]
    hydra = cli(
        tmp_path, "-m", "--config-dir", str(ROOT / "sweeps"), "--config-name", "c1_gpu_bandwidth", *args
    )
    assert hydra.returncode == 0, explain(hydra)
    (mdir,) = list((tmp_path / "outputs" / "multirun").glob("*/*"))
    plan, out = sweep(tmp_path, args, target="c1_gpu_bandwidth")
    # c1_gpu_bandwidth runs each design at TP 2, 4 and 8 (shared/reference/claims.md C1): 3 x 2 models
    # x 2 batches
    assert len(plan.jobs) == 12 and out.counts()["ok"] == 12
    for d in result_dirs(out.sweep_dir):
        fast = json.loads((d / "result.json").read_text())
        ref = json.loads((mdir / d.name / "result.json").read_text())
        assert fast["config"] == ref["config"], d.name
        assert fast["config_hash"] == ref["config_hash"]
        assert fast["metrics"] == pytest.approx(ref["metrics"], rel=1e-12)
    # the sweep file's params (model, hardware, TP 2,4,8 ...) with the command line winning
    assert plan.jobs[0][:3] == ["model=llama3_2_1b", "hardware=dgx_h100", "hardware.tensor_parallel=2"]


def check_designs_4_workers_one_store(tmp_path, models: str, batches: str, prompts: str, n: int):
    """n designs evaluated by 4 worker processes, recorded in one SQLite store: every design
    exactly once, each under the sweep's parent, with the callback's params/metrics/tags."""
    overrides = [
        f"model={models}",
        f"workload.batch_size={batches}",
        f"workload.prompt_len={prompts}",
        *tracking_args(tmp_path),
    ]
    plan, out = sweep(tmp_path, overrides, jobs=4)
    assert len(plan.jobs) == n and not out.tracker_error and out.recorded == n
    parents, children = split(runs(sqlite_uri(tmp_path)))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    pm = parents[0].data.metrics
    assert pm["n_designs"] == n and pm["n_ok"] + pm["n_infeasible"] == n
    assert len(children) == n  # none lost
    hashes = [c.data.tags["config_hash"] for c in children]
    assert len(set(hashes)) == n  # none doubled
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert all(c.info.status == "FINISHED" for c in children)
    dirs = result_dirs(out.sweep_dir)
    assert [int(d.name) for d in dirs] == list(range(n))
    by_id = {c.info.run_id: c for c in children}
    statuses = set()
    best = 0.0
    for d in dirs:
        rec = json.loads((d / "result.json").read_text())
        run = by_id[(d / "mlflow_run_id").read_text().strip()]
        assert run.data.tags["config_hash"] == rec["config_hash"]
        assert run.data.tags["status"] == rec["status"]
        statuses.add(rec["status"])
        if rec["status"] == "ok":
            assert run.data.metrics["tpot_ms"] == pytest.approx(rec["metrics"]["tpot_ms"])
            best = max(best, rec["metrics"]["tok_s_aggregate"])
        assert run.data.params["workload.batch_size"] == str(rec["config"]["workload"]["batch_size"])
    assert statuses == {"ok", "infeasible"}  # long prompts overflow max_context or memory
    assert pm["best_tok_s_aggregate"] == pytest.approx(best)  # the parent's summary metrics
    table = load_results(out.sweep_dir)
    assert list(table.job) == list(range(n)) and set(table.config_hash) == set(hashes)
    assert (table.run_id == [(d / "mlflow_run_id").read_text().strip() for d in dirs]).all()


def test_designs_4_workers_one_store(tmp_path):
    """48 designs (the size is not the point: 4 workers, one store, none lost or doubled)."""
    check_designs_4_workers_one_store(
        tmp_path, "llama3_2_1b,llama3_1_8b,qwen2_5_0_5b", "1,8,64,512", "128,2048,32768,131072", 48
    )


@pytest.mark.benchmark
def test_benchmark_500_designs_4_workers_one_store(tmp_path, record_property):
    """The same at scale: 500 designs (reports its time; run with -m benchmark)."""
    t0 = time.perf_counter()
    check_designs_4_workers_one_store(
        tmp_path,
        "llama3_2_1b,llama3_2_3b,llama3_1_8b,llama2_7b,qwen2_5_0_5b",
        "1,2,4,8,16,32,64,128,256,512",
        "128,512,1024,2048,3968,8192,16384,32768,65536,131072",
        500,
    )
    record_property("designs_500_4_workers_s", time.perf_counter() - t0)


# --------------------------------------------------------------------------- no lost results


@pytest.mark.slow
def test_tracking_server_down_mid_sweep_then_sync(tmp_path):
    """A real MLflow server dies mid-sweep: the sweep completes, every result is on disk, and
    `decodelab sync` uploads the rest afterwards, once (a second sync uploads nothing)."""
    server = MlflowServer(tmp_path, free_port()).start()
    n = 30
    args = [
        "sweep",
        "model=llama3_2_1b,llama3_1_8b,qwen2_5_0_5b",
        "workload.batch_size=range(1,11)",
        f"tracking.uri={server.uri}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "-j",
        "1",
        "-q",
        "--children",
        "all",
    ]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "200", **FAIL_FAST}
    proc = subprocess.Popen(
        [sys.executable, "-m", "decodelab.apps.cli", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.monotonic()
        while len(list((tmp_path / "sweep").glob("*/mlflow_run_id"))) < 5:
            assert proc.poll() is None and time.monotonic() - t0 < 180, proc.communicate()
            time.sleep(0.02)
        server.kill()
        out, err = proc.communicate(timeout=300)
    finally:
        server.kill()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"{out}\n{err}"
    dirs = result_dirs(tmp_path / "sweep")
    assert len(dirs) == n  # all results on disk
    marked = [d for d in dirs if (d / "mlflow_run_id").exists()]
    assert 5 <= len(marked) < n, len(marked)
    assert "did not reach the tracker" in out and "decodelab sync" in out

    server.start()
    try:
        s1 = cli(tmp_path, "sync", str(tmp_path / "sweep"), env=FAIL_FAST)
        assert s1.returncode == 0, explain(s1)
        assert re.search(rf"\b{n - len(marked)} uploaded", s1.stdout), s1.stdout
        s2 = cli(tmp_path, "sync", str(tmp_path / "sweep"), env=FAIL_FAST)
        assert s2.returncode == 0 and "0 uploaded" in s2.stdout, explain(s2)
        parents, children = split(runs(server.uri))
    finally:
        server.kill()
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"  # the sweep's own parent
    finished = [c for c in children if c.info.status == "FINISHED"]
    assert len(finished) == n
    assert len({c.data.tags["config_hash"] for c in finished}) == n
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in finished)
    assert all((d / "mlflow_run_id").exists() for d in dirs)


# loky's resource-tracker process (a child of the sweep sharing its stderr) prints a KeyError traceback when a
# joblib memmapping folder is unregistered twice as the pool is torn down mid-task: a race inside joblib
# (joblib/joblib issues #1243, #1076), seen once in many interrupted runs; the sweep's own output holds none
_LOKY_RACE = re.compile(
    r"Traceback \(most recent call last\):\n(?:[ \t].*\n)*?KeyError: '[^']*joblib_memmapping_folder[^']*'\n?"
)


def without_loky_tracker_race(err: str) -> str:
    return _LOKY_RACE.sub("", err)


@pytest.mark.slow
def test_interrupted_sweep_rerun_runs_only_the_missing_designs(tmp_path):
    """Ctrl-C stops a sweep; the same command again evaluates only what is not recorded; then
    `decodelab -m` over a superset skips the recorded designs too."""
    args = [
        "sweep",
        "model=llama3_2_1b,llama3_1_8b",
        "workload.batch_size=range(1,21)",
        *tracking_args(tmp_path),
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "-j",
        "2",
        "-q",
        "--children",
        "all",
    ]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "decodelab.apps.cli", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    while len(list((tmp_path / "sweep").glob("*/mlflow_run_id"))) < 5:
        assert proc.poll() is None and time.monotonic() - t0 < 180, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, f"{out}\n{err}"
    assert "interrupted" in out and "Traceback" not in without_loky_tracker_race(err), err
    first = len(split(runs(sqlite_uri(tmp_path)))[1])
    assert 5 <= first < 40

    again = cli(tmp_path, *args)
    assert again.returncode == 0, explain(again)
    assert f"{first} designs already recorded" in again.stdout
    table = load_results(tmp_path / "sweep")  # exactly the 40 designs, none twice
    assert list(table.job) == list(range(40)) and table.config_hash.nunique() == 40
    assert (table.reused_from != "").sum() == first  # only the missing ones ran
    parents, children = split(runs(sqlite_uri(tmp_path)))
    assert len(parents) == 1  # the same sweep directory: one parent
    first_parent = parents[0].info.run_id
    assert len(children) == 40 and len({c.data.tags["config_hash"] for c in children}) == 40

    # plain Hydra multirun: jobs already recorded are skipped by the job itself
    m = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=1,2,21", *tracking_args(tmp_path))
    assert m.returncode == 0, explain(m)
    parents, children = split(runs(sqlite_uri(tmp_path)))
    recorded = [c for c in children if "config_hash" in c.data.tags]
    assert len(recorded) == 41 and len(parents) == 2
    assert len({c.data.tags["config_hash"] for c in recorded}) == 41
    (b31,) = [c for c in recorded if c.data.params["workload.batch_size"] == "21"]
    second_parent = b31.data.tags["mlflow.parentRunId"]
    assert second_parent != first_parent
    assert m.stdout.count("already recorded") == 2
    # the new parent still lists all 3 of its designs: the 2 recorded ones as links
    links = [c for c in children if c.data.tags.get("reused") == "true"]
    assert len(links) == 2 and all(c.data.tags["mlflow.parentRunId"] == second_parent for c in links)
    by_id = {c.info.run_id: c for c in recorded}
    for c in links:
        orig = by_id[c.data.tags["reused_from"]]
        assert orig.data.tags["config_hash"] == c.data.tags["reused_config_hash"]
        assert orig.data.tags["mlflow.parentRunId"] == first_parent
        assert c.data.metrics["tpot_ms"] == pytest.approx(orig.data.metrics["tpot_ms"])
    jobs = sorted((tmp_path / "outputs" / "multirun").glob("*/*/[0-9]*/result.json"))
    assert len(jobs) == 3 and sum("reused_from" in json.loads(f.read_text()) for f in jobs) == 2


def test_tracking_off_writes_results_and_no_store(tmp_path):
    plan, out = sweep(tmp_path, ["model=llama3_2_1b", "workload.batch_size=1,2,3", "tracking=off"])
    assert out.counts()["ok"] == 3 and not out.tracking
    assert len(result_dirs(out.sweep_dir)) == 3
    assert not (tmp_path / "outputs" / "mlflow.db").exists()
    assert not list(out.sweep_dir.glob("*/mlflow_run_id"))


# --------------------------------------------------------------------------- bad input


def test_bad_sweep_input_is_one_line_before_anything_runs(tmp_path):
    r = cli(tmp_path, "sweep", "model=llama3_2_1b,no_such_model", "tracking=off")
    assert r.returncode == 2 and "Traceback" not in r.stderr, explain(r)
    assert "error: model=no_such_model: no such option" in r.stderr and "llama3_1_8b" in r.stderr
    r = cli(tmp_path, "sweep", "workload.batch_size=1,eight", "model.n_kv_head=8", "tracking=off")
    assert r.returncode == 2 and "Traceback" not in r.stderr, explain(r)
    assert "workload.batch_size=eight: wrong type, expected an integer" in r.stderr
    assert "model.n_kv_head: no such field; did you mean 'n_kv_heads'?" in r.stderr
    r = cli(tmp_path, "sweep", "no_such_sweep", "tracking=off")
    assert r.returncode == 2 and "c1_gpu_bandwidth" in r.stderr, explain(r)
    assert not (tmp_path / "outputs").exists()


# --------------------------------------------------------------------------- compare


def test_compare_puts_runs_side_by_side_and_exports_csv(tmp_path):
    import pandas as pd

    plan, out = sweep(
        tmp_path, ["model=llama3_2_1b,llama3_1_8b", "workload.batch_size=1,4", *tracking_args(tmp_path)]
    )
    ids = [r["run_id"] for r in out.records]
    from decodelab.apps.compare import main

    csv = tmp_path / "cmp.csv"
    assert main([*ids[:2], f"tracking.uri={sqlite_uri(tmp_path)}", "--csv", str(csv)]) == 0
    df = pd.read_csv(csv)
    assert list(df["run_id"]) == sorted(ids[:2]) or set(df["run_id"]) == set(ids[:2])
    assert "workload.batch_size" in df.columns and "model.name" not in df.columns  # differs only
    assert {"tpot_ms", "tok_s_aggregate", "status"} <= set(df.columns)
    assert (
        main(
            [
                f"tracking.uri={sqlite_uri(tmp_path)}",
                "--filter",
                "params.model.name = 'llama3_1_8b'",
                "--csv",
                str(csv),
            ]
        )
        == 0
    )
    df = pd.read_csv(csv)
    assert len(df) == 2 and sorted(df["workload.batch_size"]) == [1, 4]
    ok = {r["run_id"]: r["metrics"]["tpot_ms"] for r in out.records}
    for rid, tpot in zip(df["run_id"], df["tpot_ms"]):
        assert tpot == pytest.approx(ok[rid])


# --------------------------------------------------------------------------- search


def test_search_pareto_front_seeded_and_logged(tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    monkeypatch.chdir(tmp_path)
    from decodelab.apps.search import log_search, write_outputs_of
    from decodelab.runs.search import load_space, pareto, run_search

    space = load_space("llama70b_throughput_latency")
    args = dict(trials=25, seed=3, sampler="tpe")
    a = run_search(space, ["tracking=off"], out_dir=tmp_path / "a", progress=False, **args)
    b = run_search(space, tracking_args(tmp_path), out_dir=tmp_path / "b", progress=False, **args)
    strip = lambda rows: [
        {k: v for k, v in r.items() if k not in ("_record", "run_id")}  # noqa
        for r in rows
    ]
    assert strip(a["rows"]) == strip(b["rows"])  # seeded: the same trials
    rows = b["rows"]
    assert len(rows) == 25
    pruned = [r for r in rows if r["status"] != "ok"]
    assert pruned and all(r["reason"] for r in pruned)  # e.g. 70B BF16 on too few chips
    states = {t.number: t.state.name for t in b["study"].trials}
    assert all(states[r["trial"]] == "PRUNED" for r in pruned)
    feasible = [r for r in rows if r.get("feasible")]
    assert all(r["tpot_ms"] <= 50 for r in feasible)
    front = b["front"]
    assert front and set(
        pareto([[r["tok_s_aggregate"], r["tpot_ms"]] for r in front], ["maximize", "minimize"])
    ) == set(range(len(front)))
    for r in feasible:  # nothing feasible dominates the front
        assert not any(
            r["tok_s_aggregate"] > f["tok_s_aggregate"] and r["tpot_ms"] < f["tpot_ms"] for f in front
        )
    artifacts = write_outputs_of(b)
    assert log_search(b, space, artifacts, 3, "tpe", 25) is None
    parents, children = split(runs(sqlite_uri(tmp_path)))
    (parent,) = parents
    assert parent.data.tags["kind"] == "search" and parent.data.metrics["n_trials"] == 25
    assert parent.data.metrics["n_pruned"] == len(pruned)
    assert len(children) == len(front) == parent.data.metrics["n_pareto"]
    names = {f.path for f in client(sqlite_uri(tmp_path)).list_artifacts(parent.info.run_id)}
    assert {"pareto.csv", "pareto.png", "trials.csv", "results.parquet"} <= names
    table = load_results(b["out_dir"])  # every trial, infeasible ones with their reason
    assert sorted(table.job) == list(range(25)) and (table.status != "ok").sum() == len(pruned)
    assert (table[table.status != "ok"].reason != "").all()


# --------------------------------------------------------------------------- generated configs


NIGHTLY = os.environ.get("DECODELAB_NIGHTLY") == "1"
FIELD = re.compile(r"\b[a-z_]+\.[a-z_0-9.]+")


@pytest.fixture(scope="module")
def composer():
    from decodelab.config import plan as SP

    src = SP.Source(None, "config", ())
    ctx = SP.hydra_context(src)
    loader = ctx.__enter__()
    yield SP.Composer(src, loader)
    ctx.__exit__(None, None, None)


def _options(group):
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


def test_generated_configs_fail_only_with_clear_messages(composer):
    """Random designs (valid and invalid values, wrong types): every result is ok with finite
    metrics, infeasible with a reason, or invalid with a message naming the field."""
    from decodelab.config import plan as SP
    from decodelab.runs.items import run as run_job
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    ints = st.one_of(st.integers(-4, 8), st.sampled_from([16, 128, 4096, 131072, 10**7]))
    value = {
        "workload.batch_size": ints,
        "workload.prompt_len": ints,
        "workload.output_len": ints,
        "workload.weight_dtype": st.sampled_from(["bf16", "fp8", "int4", "fp16", "fp7", "eight"]),
        "workload.kv_dtype": st.sampled_from(["bf16", "fp8", "int8", "nope"]),
        "hardware.tensor_parallel": st.sampled_from([0, 1, 2, 3, 4, 8, 16, 64]),
        "hardware.n_chips": st.sampled_from([1, 2, 8, 16, -1]),
        "speculative.k": st.integers(-1, 12),
        "speculative.acceptance": st.one_of(st.floats(-0.5, 1.5), st.just(float("nan"))),
        "kv_policy.budget": st.sampled_from([0, 64, 512, 2048, -5]),
        "optimizations.kernel_looping": st.sampled_from(["true", "false", "maybe"]),
        "optimizations.fusion": st.sampled_from(["auto", "none", "layer", "bogus"]),
    }
    names = ("model", "hardware", "kv_policy", "optimizations", "speculative")
    if NIGHTLY:  # any choice of components (each new choice costs a Hydra composition)
        choice = st.tuples(*[st.sampled_from(_options(g)) for g in names])
    else:  # CI: a fixed sample of 16 choices, composed once each
        import random

        rnd = random.Random(7)
        choice = st.sampled_from([tuple(rnd.choice(_options(g)) for g in names) for _ in range(16)])

    @st.composite
    def job(draw):
        j = [f"{g}={v}" for g, v in zip(names, draw(choice))]
        keys = draw(st.lists(st.sampled_from(sorted(value)), unique=True, max_size=5))
        return j + [f"{k}={draw(value[k])}" for k in keys]

    seen = {}

    examples = int(os.environ.get("DECODELAB_HYPOTHESIS_EXAMPLES", 10_000 if NIGHTLY else 250))

    @settings(
        max_examples=examples, deadline=None, derandomize=not NIGHTLY, suppress_health_check=list(HealthCheck)
    )
    @given(job())
    def check(j):
        cfg, cfg_dict, name, error = SP.prepare(composer, j)
        res = run_job(cfg, error)
        seen[res["status"]] = seen.get(res["status"], 0) + 1
        assert res["status"] in ("ok", "infeasible", "invalid"), (j, res["reason"], res.get("traceback"))
        if res["status"] == "ok":
            m = res["metrics"]
            assert all(math.isfinite(v) for v in m.values()), (j, m)
            assert m["tpot_ms"] > 0 and m["tok_s_aggregate"] > 0, (j, m)
        else:
            lines = res["reason"].splitlines()
            assert lines and all(line.strip() for line in lines), (j, res)
            assert "Traceback" not in res["reason"], (j, res)
            if res["status"] == "invalid":
                assert all(FIELD.search(line) for line in lines), (j, res["reason"])

    check()
    assert {"ok", "infeasible", "invalid"} <= set(seen), seen


# --------------------------------------------------------------------------- benchmarks


@pytest.mark.benchmark
def test_benchmark_1000_designs_with_mlflow(tmp_path, record_property):
    """Target: 1,000 designs including MLflow logging <= 60 s on a 2-core machine."""
    t0 = time.perf_counter()
    r = cli(
        tmp_path,
        "sweep",
        "scale/bench_1000",
        "-q",
        "--children",
        "all",
        *tracking_args(tmp_path),
        timeout=900,
    )
    wall = time.perf_counter() - t0
    assert r.returncode == 0, explain(r)
    n = len(split(runs(sqlite_uri(tmp_path)))[1])
    print(f"\n1000-design sweep with MLflow: {wall:.1f} s wall ({n} runs)")
    assert n == 1000
    record_property("sweep_1000_designs_s", wall)  # target 60 s: reported, not asserted


@pytest.mark.benchmark
def test_benchmark_cold_start(tmp_path, record_property):
    """Target: a real `decodelab` run (warm Numba cache) in <= 2 s. The first run warms the
    cache and creates the store; the best of three runs after it is reported. Recording in the
    foreground loads MLflow (~2 s more); in the background (the default at a terminal) the
    command returns first and a detached `decodelab sync` records the run."""
    cli(tmp_path, "tracking=off", "quiet=true", process=True)
    times = {}
    for label, args in (
        ("tracking=off", ["tracking=off"]),
        ("sqlite, background", ["tracking.background=true"]),
        ("sqlite, foreground", ["tracking.background=false"]),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            r = cli(tmp_path, *args, "quiet=true", process=True)
            best = min(best, time.perf_counter() - t0)
            assert r.returncode == 0, explain(r)
        times[label] = best
    print("\ncold start: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    for label, seconds in times.items():  # target 2 s: reported, not asserted
        record_property(f"cold_start_{label}_s", seconds)
    # every run is recorded, the background ones by their sync processes
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dirs = [d for d in (tmp_path / "outputs" / "runs").glob("*/*") if (d / "result.json").exists()]
        if sum((d / "mlflow_run_id").exists() for d in dirs) == 6:
            break
        time.sleep(1)
    assert len(dirs) == 10 and sum((d / "mlflow_run_id").exists() for d in dirs) == 6, dirs
    assert len(split(runs(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"))[1]) == 6
