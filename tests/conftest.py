"""Shared test helpers: composing Hydra configs (cached), the lists of config-group options,
running the `decodelab` command in a subprocess and reading back its files and MLflow store."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List

import decodelab.config.schema  # noqa: F401  (registers the typed schemas)
import pytest
import yaml
from decodelab.config.compose import CONF_DIR
from decodelab.modes.serving.layout import Req
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

MODELS = sorted(p.stem for p in (Path(CONF_DIR) / "model").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (Path(CONF_DIR) / "hardware").glob("*.yaml"))
OPTIMIZATIONS = ("none", "default", "all")
GPU_HARDWARE = ("h100_sxm", "a100_sxm", "dgx_h100", "dgx_a100")
DATAFLOW_HARDWARE = ("sn40l_socket", "sn40l_node8", "sn40l_rack16")


@functools.lru_cache(maxsize=None)
def _compose_cached(overrides: tuple):
    # A fresh Hydra context per composition: nothing global stays initialised between tests.
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


# the serving front end off (engine.frontend): hand-worked scheduler timings start at the scheduler
NO_FRONTEND = ("engine.frontend.request_ms=0", "engine.frontend.tokenize_mb_s=0")
# Llama-3.1-8B BF16 on one H100 under the roofline law at peak (every efficiency 1, no sync, host or
# collective overhead), the Kernel Looping paper's kernels, a 4,095-token prompt and 2 output tokens
# (tests/test_eager_launch.py, tests/test_sustained_clocks.py)
LLAMA8B_H100_PEAK = (
    "model=llama3_1_8b",
    "hardware=h100_sxm",
    "hardware.op_model=roofline",
    "engine.fused_add_norm=false",
    "workload.batch_size=1",
    "workload.prompt_len=4095",
    "workload.output_len=2",
    "hardware.bw_eff_max=1",
    "hardware.bw_half_mb=0",
    "hardware.compute_eff_max=1",
    "hardware.compute_half_gflop=0",
    "hardware.attn_compute_eff_max=1",
    "hardware.sync_us=0",
    "hardware.host_step_us=0",
    "hardware.collective_latency_us=0",
)


def compose_cfg(*overrides: str):
    """The composed config for `overrides` (tracking off); a private deep copy the caller may
    mutate. Compositions are cached, so repeating a combination costs a deepcopy (~2 ms)."""
    return copy.deepcopy(_compose_cached(("tracking=off",) + tuple(overrides)))


AIC_SMOKE_COLUMNS = (
    "id,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,"
    "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n"
)


def assert_aic_rows_run(tmp_path, rows):
    """`decodelab validate` on AIConfigurator-schema `rows` (CSV lines under AIC_SMOKE_COLUMNS; placeholder timings:
    a smoke test of a chip's or a model's files, never a fit): every row runs, with a TTFT and a TPOT."""
    from decodelab.runs.validation import run_validation

    p = tmp_path / "rows.csv"
    p.write_text(AIC_SMOKE_COLUMNS + "".join(rows))
    df = run_validation(p)
    assert list(df.status) == ["ok"] * len(rows)
    assert (df.tpot_pred > 0).all() and (df.ttft_pred > 0).all()
    return df


def assert_import_matches_shipped(config_path, name: str, arch: str = "hybrid"):
    """`decodelab import-model` on a public config.json gives every field of the shipped conf/model/<name>.yaml,
    with nothing left unexpressed."""
    from decodelab.config import hf_model

    imp = hf_model.from_config(hf_model.load_json(str(config_path)), name, str(config_path))
    shipped = compose_cfg(f"model={name}").model
    assert imp.unexpressed == [] and imp.values["arch"] == arch
    for k, v in imp.values.items():
        assert (list(v) if isinstance(v, list) else v) == (
            list(shipped[k]) if isinstance(v, list) else shipped[k]
        ), k


def assert_steps_match_reference(cfg, batch: int, prompt: int, output: int, n_steps: int = 3):
    """The Numba kernel's first `n_steps` static steps (prefill, then decode) of `batch` requests of
    `prompt` + `output` tokens equal its pure-Python reference's, cause by cause, for `cfg`."""
    import math

    from decodelab.core.build import build
    from decodelab.core.kernel import request_steps, simulate
    from decodelab.core.reference import reference_simulate
    from decodelab.kernel_layout import CAUSES

    cfg.workload.batch_size, cfg.workload.prompt_len, cfg.workload.output_len = batch, prompt, output
    design = build(cfg)
    steps = request_steps(batch, prompt, output)[:n_steps]
    out = simulate(*design.arrays(), steps)
    for r, row in enumerate(reference_simulate(design, cfg, steps)):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)


def assert_serve_matches_reference(cfg):
    """The Numba scheduler's requests equal its pure-Python reference's for `cfg` (a serving
    config); returns the kernel's step rows."""
    import numpy as np
    from decodelab.core.build import build
    from decodelab.modes.serving import simulate as S
    from decodelab.modes.serving.mtp import draft_cfg
    from decodelab.modes.serving.reference import engine_dict, reference_serve, reference_table

    design = build(cfg)
    req, steps, mixed, eng, _ = S.simulate_serving(cfg, design)
    p = S.prepare(cfg, design)
    draft = None
    if p["draft"] is not None:  # in-engine MTP: the draft's designs (modes/serving/mtp.py)
        dcfg = draft_cfg(cfg)
        d = build(dcfg)
        draft = (d, S.mixed_design(dcfg, d)[0], dcfg)
    ref = reference_serve(
        design, cfg, mixed, engine_dict(eng, p["buckets"]), p["arrival"], p["prompt"], p["output"], p["think"],
        draft,
    )  # fmt: skip
    cols = [Req.ARRIVAL, Req.START, Req.FIRST, Req.DONE, Req.PREEMPT, Req.MAX_ITL]
    np.testing.assert_allclose(req[:, cols], reference_table(ref, p["delay"]), rtol=1e-9, atol=1e-12)
    return steps


def one_client_cfg(*overrides: str, p: int = 1000, o: int = 8):
    """A closed loop of one client sending one request of `p` prompt and `o` output tokens."""
    return compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=1",
        "workload.n_requests=1",
        f"workload.prompt_len={p}",
        f"workload.output_len={o}",
        *overrides,
    )


# A closed loop's lengths drawn uniformly (prompts 240-300, outputs 32-40 tokens): the scheduler
# tests' workload where requests end at different steps
UNIFORM_LENGTHS = (
    "workload.prompt_len=300",
    "workload.output_len=40",
    "workload.prompt_dist.kind=uniform",
    "workload.prompt_dist.low=240",
    "workload.prompt_dist.high=300",
    "workload.output_dist.kind=uniform",
    "workload.output_dist.low=32",
    "workload.output_dist.high=40",
)


# 200-token prompts and outputs drawn in 2-30 tokens: the READY / arrival-order scheduler tests'
# requests, ending at different steps after short prefills
SHORT_UNIFORM_OUTPUTS = (
    "workload.prompt_len=200",
    "workload.output_len=12",
    "workload.output_dist.kind=uniform",
    "workload.output_dist.low=2",
    "workload.output_dist.high=30",
)


def trace_file(tmp_path: Path, rows) -> str:
    """A workload.trace CSV of (arrival_s, prompt_len, output_len) rows; its path."""
    p = tmp_path / "trace.csv"
    p.write_text("arrival_s,prompt_len,output_len\n" + "".join(f"{float(a)!r},{n},{o}\n" for a, n, o in rows))
    return str(p)


def compose_raw(*overrides: str):
    """Compose without the cache (for tests that expect composition itself to fail)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


# Fixtures that take 5-70 s to build, once per process that uses them; their tests are `slow` (not in
# the fast lane, `pytest -m "not slow"`). pytest-xdist (`-n auto`,
# pyproject.toml) gives every test that uses one the same group (`--dist loadgroup`), so one worker
# builds each, instead of each worker that happens to draw one of its tests. Tests without them are
# spread as before.
SHARED_FIXTURE_GROUPS = {
    "claim_rows": "claim_rows",  # every claim sweep (test_claims, test_coe, test_numbers, ...)
    "mixed": "grid_mixed",  # test_grid: 1,000 designs through the per-design path
    "smollm": "smollm",  # test_fidelity: the real model and its passkey runs
    "accept_rows": "smollm",
    "small_store": "small_store",  # test_output: a sweep into a store
    "joblib_sweep": "joblib_sweep",  # a joblib multirun (test_cli_multirun, test_output)
    "default_run": "default_run",  # `decodelab` with no arguments, in a subprocess
    "infeasible_run": "infeasible_run",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("benchmark"):
            # `-m "not slow"` replaces addopts' `-m 'not benchmark'`: the fast lane leaves them out too
            item.add_marker(pytest.mark.slow)
        groups = {g for f, g in SHARED_FIXTURE_GROUPS.items() if f in getattr(item, "fixturenames", ())}
        if groups:
            item.add_marker(pytest.mark.xdist_group(sorted(groups)[0]))
            item.add_marker(pytest.mark.slow)  # its fixture alone is over the fast lane's budget


@pytest.fixture(scope="session")
def claim_rows():
    """Every claim figure (decodelab.runs.claims.run_claims), computed once per test session."""
    from decodelab.runs.claims import run_claims

    return run_claims()


@pytest.fixture(scope="session")
def compose():
    """`compose(*overrides)` -> a mutable composed config (cached composition)."""
    return compose_cfg


def claim_figure_params(ids, gaps: dict) -> list:
    """One pytest param per figure of the claim sweeps whose id is in `ids`; the figures named
    in `gaps` ({(id, figure): reason}) are strict xfails with that reason."""
    from decodelab.config.sweepfile import load_sweep
    from decodelab.paths import SWEEPS_DIR

    out = []
    for path in sorted(SWEEPS_DIR.glob("c*.yaml")):
        claim, _ = load_sweep(path)
        if claim["id"] in ids:
            for fig in claim["figures"]:
                key = (claim["id"], fig["name"])
                marks = [pytest.mark.xfail(reason=gaps[key], strict=True)] if key in gaps else []
                out.append(pytest.param(key, marks=marks, id=f"{key[0]}-{key[1]}"))
    return out


# --------------------------------------------------------------------------- the command line

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
USER_CONF = ROOT / "examples" / "user_conf"
GROUPS = ("model", "hardware", "kv_policy", "optimizations", "workload", "tracking")
EXPERIMENT = "decodelab"
# The files a successful (status ok) run writes and logs as MLflow artifacts.
OK_FILES = {"result.json", "steps.csv", "breakdown.png", "config_resolved.yaml"}
# the joblib multirun: 6 jobs, ok and infeasible on GPU and dataflow (the size is not the point)
SWEEP_MODELS = ("llama3_1_8b", "llama3_1_70b", "llama3_2_1b")
SWEEP_HARDWARE = ("h100_sxm", "sn40l_node8")
# Nothing listens on the discard port: a tracking server that cannot be reached.
DEAD_SERVER = "http://127.0.0.1:9"
# MLflow's SQLAlchemy store, read back in this process, warns about its own ORM usage.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")
FAIL_FAST = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"}


# --------------------------------------------------------------------------- helpers


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        return self.out + self.err

    def explain(self) -> str:
        return f"exit {self.rc}\n--- stdout\n{self.out[-4000:]}\n--- stderr\n{self.err[-4000:]}"


def decodelab(
    cwd: Path, *args: str, env: dict | None = None, timeout: float = 300, process: bool = False
) -> Result:
    """Run `decodelab ARGS` with `cwd` as working directory (outputs/ goes there): in this
    process (decodelab.apps.cli.main, see run_in_process), or with `process=True` as its own
    `python -m decodelab.apps.cli` process, for what only a process shows (start-up, the
    console script end to end, detached background work)."""
    if not process:
        t0 = time.monotonic()
        code, out, err = run_in_process(cwd, args, env=env)
        return Result(code, out, err, time.monotonic() - t0)
    e = dict(os.environ)
    e.pop("HYDRA_FULL_ERROR", None)  # the tests read Hydra's short error messages
    e["MLFLOW_DISABLE_TELEMETRY"] = "true"
    e["COLUMNS"] = "200"  # rich: one table line per row, no wrapping
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "decodelab.apps.cli", *args],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def forget_relative_stores() -> None:
    """MLflow caches one store and one SQLAlchemy engine per store URI for the whole process; a relative URI
    (the default sqlite:///outputs/mlflow.db) means another file in another working directory,
    so in-process calls drop those engines (and decodelab's opened-under-lock marks) first."""
    from decodelab.tracking import store
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service import utils

    type(utils._tracking_store_registry)._get_store_with_resolved_uri.cache_clear()
    for uri in list(SqlAlchemyStore._engine_map):
        if uri.startswith("sqlite:") and not uri.startswith("sqlite:////"):
            SqlAlchemyStore._engine_map.pop(uri).dispose()
    store._OPENED.difference_update({u for u in store._OPENED if not u.startswith("sqlite:////")})


def run_in_process(cwd: Path, argv, env: dict | None = None, columns: int = 200) -> tuple:
    """decodelab.apps.cli.main(argv) in this process with `cwd` as working directory:
    (exit status, stdout, stderr). For tests about what a command does, not about the process
    (start-up, signals, parallel writers): it saves the ~5 s start of a `decodelab` process.
    `env`: variables set for the call; COLUMNS (rich's width) defaults to 200."""
    from decodelab.apps import cli

    out, err = io.StringIO(), io.StringIO()
    old, argv0 = os.getcwd(), list(sys.argv)
    saved = {k: os.environ.get(k) for k in [*(env or {}), "COLUMNS", "HYDRA_FULL_ERROR"]}
    os.environ.pop("HYDRA_FULL_ERROR", None)  # the tests read Hydra's short error messages
    os.environ.update({"COLUMNS": str(columns), "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})})
    os.chdir(cwd)
    forget_relative_stores()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(list(argv))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        forget_relative_stores()
        os.chdir(old)
        sys.argv[:] = argv0
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def db_path(cwd: Path) -> Path:
    return cwd / "outputs" / "mlflow.db"


def client(cwd: Path):
    from mlflow.tracking import MlflowClient

    path = db_path(cwd)
    assert path.is_file(), f"no MLflow store at {path}"  # a client would create an empty one
    return MlflowClient(f"sqlite:///{path}")


def all_runs(cwd: Path) -> list:
    c = client(cwd)
    exp = c.get_experiment_by_name(EXPERIMENT)
    assert exp is not None, f"experiment {EXPERIMENT!r} missing"
    return c.search_runs([exp.experiment_id], max_results=1000)


def split_sweep(runs: list):
    parents = [r for r in runs if r.data.tags.get("sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("sweep") != "true"]
    return parents, children


def artifact_names(cwd: Path, run_id: str) -> set:
    return {f.path for f in client(cwd).list_artifacts(run_id)}


def run_dirs(cwd: Path) -> List[Path]:
    """Hydra run directories of single runs: outputs/runs/<date>/<time>."""
    return sorted(p for p in (cwd / "outputs" / "runs").glob("*/*") if p.is_dir())


def the_run_dir(cwd: Path) -> Path:
    dirs = run_dirs(cwd)
    assert len(dirs) == 1, dirs
    return dirs[0]


def job_dirs(cwd: Path) -> List[Path]:
    """Hydra job directories of multiruns: outputs/multirun/<date>/<time>/<job number>."""
    return sorted(p for p in (cwd / "outputs" / "multirun").glob("*/*/*") if p.is_dir())


def read_result(d: Path) -> dict:
    return json.loads((d / "result.json").read_text())


def group_options(group: str) -> List[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def searchpath(*dirs: Path) -> str:
    return "hydra.searchpath=[" + ",".join(f"file://{d.resolve()}" for d in dirs) + "]"


def write_model(conf_dir: Path, stem: str, **fields) -> Path:
    """A model YAML in a user config directory: the llama3_1_8b shape, `name` = stem, + fields."""
    base = yaml.safe_load((CONF / "model" / "llama3_1_8b.yaml").read_text())
    base.update(name=stem, source="written by tests/test_cli.py")
    base.update(fields)
    path = conf_dir / "model" / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def has_title(out: str, label: str) -> bool:
    """Whether a printed table is titled `label` (rich wraps a title to the table's width)."""
    return any(" ".join(label.split()) in " ".join(chunk.split()) for chunk in out.split("┏"))


def table_rows(out: str) -> dict:
    """The metric table printed by a run, as {metric: value} (rich box-drawing table)."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        if len(cells) == 4 and cells[1] and cells[2]:
            rows[cells[1]] = cells[2]
    return rows


def help_groups(text: str) -> dict:
    section = text.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
    return {m.group(1): m.group(2).split(", ") for m in re.finditer(r"^(\w+): (.+)$", section, re.M)}


def cli(cwd: Path, *args: str, env: dict | None = None, timeout: float = 300, process: bool = False):
    """`decodelab ARGS` (cwd: where outputs/ goes; in this process unless `process`, see
    decodelab()) -> subprocess.CompletedProcess."""
    r = decodelab(cwd, *args, env=env, timeout=timeout, process=process)
    return subprocess.CompletedProcess(args, r.rc, r.out, r.err)


def explain(p) -> str:
    return f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"


def mlflow_client(uri: str):
    from decodelab.tracking import store as tracking

    return tracking._client(uri)


def runs_in(uri: str, experiment: str = "decodelab"):
    c = mlflow_client(uri)
    exp = c.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r} in {uri}"
    return c.search_runs([exp.experiment_id], max_results=5000)


# --------------------------------------------------------------------------- a tracking server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 in its own process group (killed as a group)."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc = None

    def start(self, timeout: float = 120) -> "MlflowServer":
        import urllib.request

        env = {
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "server_artifacts"),
            ],
            stdout=open(self.root / "server.log", "a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-2000:]
        raise TimeoutError("mlflow server did not become healthy")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


# --------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """`decodelab` with no arguments."""
    cwd = tmp_path_factory.mktemp("default")
    res = decodelab(cwd)
    assert res.rc == 0, res.explain()
    return cwd, res


@pytest.fixture(scope="session")
def infeasible_run(tmp_path_factory):
    """Llama-3.1-70B in BF16 (~131 GiB of weights) on one 80 GB H100: does not fit."""
    cwd = tmp_path_factory.mktemp("infeasible")
    res = decodelab(cwd, "model=llama3_1_70b", "hardware=h100_sxm")
    return cwd, res


@pytest.fixture(scope="session")
def joblib_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("joblib")
    res = decodelab(
        cwd,
        "-m",
        "hydra/launcher=joblib",
        "model=" + ",".join(SWEEP_MODELS),
        "hardware=" + ",".join(SWEEP_HARDWARE),
        "quiet=true",
        timeout=600,
    )
    assert res.rc == 0, res.explain()
    return cwd, res


def moe_kernel_table(path: Path, dtype: str, kernels_by_ep) -> str:
    """A toy MoE table (CSV at `path`) of one block (hidden 1024, expert FFN 512, top-2 of 8, moe_tp 1):
    for each (moe_ep, {kernel_source: ms}) every kernel's rows at 1-128 tokens, `ms` at every count."""
    import pandas as pd  # heavy: on use

    rows = [
        dict(moe_dtype=dtype, num_tokens=n, hidden_size=1024, inter_size=512, topk=2, num_experts=8,
             moe_tp_size=1, moe_ep_size=ep, kernel_source=kernel, latency_ms=ms)
        for ep, kernels in kernels_by_ep
        for kernel, ms in kernels.items()
        for n in (1, 2, 4, 8, 16, 32, 64, 128)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def inferencex_source(model: str, concurrency: int, measured: str, image: str = "") -> str:
    """`silicon_data_source` of an InferenceX row of aic_silicon_dev.csv (its dumps' spelling)."""
    tail = f"; image={image}" if image else ""
    return (
        f"source_file=2026-03-25.csv; model={model}; silicon_concurrency={concurrency}; "
        f"measured={measured}; wip=False{tail}"
    )


def silicon_row(source: str, **cells):
    """One aggregated B200 row of AIConfigurator's silicon schema from `source` (its
    silicon_data_source); `cells` add or replace columns."""
    import pandas as pd  # heavy: on use

    return pd.Series({"system": "b200_sxm", "mode": "agg", "silicon_data_source": source, **cells})
