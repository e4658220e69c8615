"""End-to-end tests of the `decodelab` command line: Hydra composition, result files, MLflow.

Every test runs the real program in a subprocess whose working directory is a pytest temporary
directory, so `outputs/` (the SQLite MLflow store, the Hydra run and sweep directories) lands
there. Nothing is mocked: the MLflow store is read back with `MlflowClient`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import List

import pytest
import yaml

from framework import kernel as K

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
USER_CONF = ROOT / "examples" / "user_conf"
GROUPS = ("model", "hardware", "kv_policy", "optimizations", "workload", "tracking")
EXPERIMENT = "decodelab"
# The files a successful (status ok) run writes and logs as MLflow artifacts.
OK_FILES = {"result.json", "steps.csv", "breakdown.png", "config_resolved.yaml"}
SWEEP_MODELS = ("llama3_1_8b", "llama3_1_70b", "llama3_2_1b", "llama3_2_3b", "llama2_7b")
SWEEP_HARDWARE = ("h100_sxm", "dgx_h100", "sn40l_node8", "sn40l_rack16")
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


def decodelab(cwd: Path, *args: str, env: dict | None = None, timeout: float = 300) -> Result:
    """Run `decodelab ARGS` with `cwd` as working directory (outputs/ goes there)."""
    e = dict(os.environ)
    e.pop("HYDRA_FULL_ERROR", None)        # the tests read Hydra's short error messages
    e["MLFLOW_DISABLE_TELEMETRY"] = "true"
    e["COLUMNS"] = "200"                    # rich: one table line per row, no wrapping
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "framework.cli", *args], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout)
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def db_path(cwd: Path) -> Path:
    return cwd / "outputs" / "mlflow.db"


def client(cwd: Path):
    from mlflow.tracking import MlflowClient
    path = db_path(cwd)
    assert path.is_file(), f"no MLflow store at {path}"   # a client would create an empty one
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
    return any(" ".join(label.split()) in " ".join(chunk.split())
               for chunk in out.split("┏"))


def table_rows(out: str) -> dict:
    """The metric table printed by a run, as {metric: value} (rich box-drawing table)."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        if len(cells) == 4 and cells[1] and cells[2]:
            rows[cells[1]] = cells[2]
    return rows


# --------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`decodelab` with no arguments."""
    cwd = tmp_path_factory.mktemp("default")
    res = decodelab(cwd)
    assert res.rc == 0, res.explain()
    return cwd, res


@pytest.fixture(scope="module")
def infeasible_run(tmp_path_factory):
    """Llama-3.1-70B in BF16 (~131 GiB of weights) on one 80 GB H100: does not fit."""
    cwd = tmp_path_factory.mktemp("infeasible")
    res = decodelab(cwd, "model=llama3_1_70b", "hardware=h100_sxm")
    return cwd, res


@pytest.fixture(scope="module")
def joblib_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("joblib")
    res = decodelab(cwd, "-m", "hydra/launcher=joblib", "model=" + ",".join(SWEEP_MODELS),
                    "hardware=" + ",".join(SWEEP_HARDWARE), "quiet=true", timeout=600)
    assert res.rc == 0, res.explain()
    return cwd, res


# --------------------------------------------------------------------------- default run


def test_default_run_prints_metric_table(default_run):
    _, res = default_run
    rows = table_rows(res.out)
    assert has_title(res.out, "llama3_1_8b | h100_sxm tp1 | full | default | b1 4096+128"), res.out
    for metric in ("TTFT", "TPOT", "tokens/s per user", "tokens/s aggregate",
                   "% of roofline (Eq. 3)", "memory hbm per chip", "kernel calls per step"):
        assert metric in rows, f"{metric!r} row missing from:\n{res.out}"
    assert re.fullmatch(r"\d+\.\d+ ms", rows["TTFT"]), rows["TTFT"]
    assert re.fullmatch(r"\d+\.\d+ ms", rows["TPOT"]), rows["TPOT"]
    assert re.fullmatch(r"\d+\.\d %", rows["% of roofline (Eq. 3)"])
    assert re.fullmatch(r"\d+\.\d+ GiB \(\d+ %\)", rows["memory hbm per chip"])
    for cause in K.CAUSES:                      # the time breakdown: one row per cause
        assert re.fullmatch(r"\d+\.\d+ ms \(\d+ %\)", rows[f"TPOT {cause}"]), (cause, rows)


def test_default_run_records_one_mlflow_run(default_run):
    cwd, _ = default_run
    runs = all_runs(cwd)
    assert len(runs) == 1, [r.info.run_name for r in runs]
    run = runs[0]
    assert run.info.status == "FINISHED"
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert tags["status"] == "ok"
    assert "reason" not in tags
    assert "mlflow.parentRunId" not in tags and "sweep" not in tags
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", tags["git_commit"]), tags["git_commit"]
    assert tags["component.model"] == "llama3_1_8b"
    assert tags["component.hardware"] == "h100_sxm"
    assert tags["component.kv_policy"] == "full"
    assert tags["component.optimizations"] == "default"
    assert tags["component.workload"] == "decode"
    assert tags["component.execution"] == "gpu"
    assert params["model.name"] == "llama3_1_8b"
    assert params["hardware.name"] == "h100_sxm"
    assert params["hardware.tensor_parallel"] == "1"          # interpolation resolved
    assert params["hardware.tiers.0.name"] == "hbm"
    assert params["workload.batch_size"] == "1"
    assert params["model.n_layers"] == "32"
    assert not any(k.startswith("tracking.") for k in params)  # tracking settings are not params
    for m in ("tpot_ms", "ttft_ms", "pct_roofline", "tok_s_user", "tok_s_aggregate",
              "roofline_tok_s", "mem_hbm_gib", "n_kernel_calls_per_step"):
        assert m in metrics, m
    for cause in K.CAUSES:
        assert f"tpot_{cause}_ms" in metrics and f"ttft_{cause}_ms" in metrics, cause
    assert metrics["tpot_ms"] > 0 and metrics["ttft_ms"] > metrics["tpot_ms"]
    assert 0 < metrics["pct_roofline"] <= 100
    # the breakdown explains the whole step time
    assert sum(metrics[f"tpot_{c}_ms"] for c in K.CAUSES) == pytest.approx(metrics["tpot_ms"],
                                                                             rel=1e-6)
    assert OK_FILES <= artifact_names(cwd, run.info.run_id)


def test_default_run_writes_hydra_run_dir(default_run):
    cwd, res = default_run
    d = the_run_dir(cwd)
    assert OK_FILES <= {p.name for p in d.iterdir()}
    assert (d / ".hydra" / "config.yaml").is_file()
    rec = read_result(d)
    assert rec["status"] == "ok" and rec["reason"] == ""
    assert rec["config"]["model"]["name"] == "llama3_1_8b"
    assert rec["config"]["hardware"]["name"] == "h100_sxm"
    # the run dir knows its MLflow run, and MLflow holds the same numbers as result.json
    run = all_runs(cwd)[0]
    assert (d / "mlflow_run_id").read_text().strip() == run.info.run_id
    for k, v in rec["metrics"].items():
        assert run.data.metrics[k] == pytest.approx(v, rel=1e-12), k
    rows = table_rows(res.out)
    assert rows["TPOT"] == f"{rec['metrics']['tpot_ms']:.3f} ms"
    assert rows["TTFT"] == f"{rec['metrics']['ttft_ms']:.2f} ms"
    steps = (d / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("phase,query_tokens,context,sequences")
    assert len(steps) == 1 + 128                # header + prefill + 127 decode steps
    assert (d / "breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    resolved = yaml.safe_load((d / "config_resolved.yaml").read_text())
    assert resolved["hardware"]["tensor_parallel"] == 1


# --------------------------------------------------------------------------- overrides


def test_overrides_reach_params(tmp_path):
    res = decodelab(tmp_path, "model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=8")
    assert res.rc == 0, res.explain()
    assert has_title(res.out, "llama3_1_70b | dgx_h100 tp8 | full | default | b8 4096+128"), res.out
    (run,) = all_runs(tmp_path)
    p, tags = run.data.params, run.data.tags
    assert tags["status"] == "ok"
    assert tags["component.model"] == "llama3_1_70b" and tags["component.hardware"] == "dgx_h100"
    assert p["model.name"] == "llama3_1_70b" and p["model.n_layers"] == "80"
    assert p["hardware.name"] == "dgx_h100"
    assert p["hardware.n_chips"] == "8" and p["hardware.tensor_parallel"] == "8"
    assert p["hardware.link_bw_gb_s"] == "450.0"
    assert p["workload.batch_size"] == "8"
    rec = read_result(the_run_dir(tmp_path))
    assert rec["config"]["workload"]["batch_size"] == 8
    assert rec["config"]["hardware"]["tensor_parallel"] == 8
    assert run.data.metrics["tok_s_aggregate"] == pytest.approx(8 * run.data.metrics["tok_s_user"])


# --------------------------------------------------------------------------- --cfg / --help


def test_cfg_job_prints_composed_config(tmp_path):
    res = decodelab(tmp_path, "--cfg", "job")
    assert res.rc == 0, res.explain()
    for section in ("model:", "hardware:", "workload:", "kv_policy:", "optimizations:",
                    "tracking:"):
        assert re.search(rf"^{section}$", res.out, re.M), section
    cfg = yaml.safe_load(res.out)
    assert cfg["model"]["name"] == "llama3_1_8b" and cfg["model"]["n_layers"] == 32
    assert cfg["hardware"]["name"] == "h100_sxm"
    assert cfg["hardware"]["tiers"][0] == {"name": "hbm", "capacity_gib": 79.6,
                                           "bandwidth_gb_s": 3350.0}
    assert cfg["workload"]["batch_size"] == 1 and cfg["workload"]["prompt_len"] == 4096
    assert not (tmp_path / "outputs").exists()        # printing the config runs nothing
    res = decodelab(tmp_path, "--cfg", "job", "model=llama3_2_1b", "workload.batch_size=16")
    cfg = yaml.safe_load(res.out)
    assert cfg["model"]["name"] == "llama3_2_1b" and cfg["workload"]["batch_size"] == 16


def help_groups(text: str) -> dict:
    section = text.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
    return {m.group(1): m.group(2).split(", ")
            for m in re.finditer(r"^(\w+): (.+)$", section, re.M)}


def test_help_lists_groups_and_options(tmp_path):
    res = decodelab(tmp_path, "--help")
    assert res.rc == 0, res.explain()
    groups = help_groups(res.out)
    for g in GROUPS:
        assert g in groups, (g, groups)
        assert sorted(groups[g]) == group_options(g), g
    assert {"llama3_1_8b", "llama3_1_70b"} <= set(groups["model"])
    assert {"h100_sxm", "dgx_h100", "sn40l_node8", "sn40l_rack16"} <= set(groups["hardware"])
    assert {"sqlite", "server", "off"} <= set(groups["tracking"])
    assert not (tmp_path / "outputs").exists()


# --------------------------------------------------------------------------- infeasible / invalid


def test_infeasible_single_run_is_recorded(infeasible_run):
    cwd, res = infeasible_run
    assert res.rc == 0, res.explain()
    assert "infeasible" in res.out and "memory" in res.out
    assert "Traceback" not in res.text
    (run,) = all_runs(cwd)
    assert run.info.status == "FINISHED"
    assert run.data.tags["status"] == "infeasible"
    assert "memory" in run.data.tags["reason"]
    assert run.data.params["model.name"] == "llama3_1_70b"
    assert run.data.metrics == {}
    # no step table or plot for a design that cannot run
    names = artifact_names(cwd, run.info.run_id)
    assert {"result.json", "config_resolved.yaml"} <= names
    assert not names & {"steps.csv", "breakdown.png"}
    rec = read_result(the_run_dir(cwd))
    assert rec["status"] == "infeasible" and "memory" in rec["reason"]
    assert not (the_run_dir(cwd) / "steps.csv").exists()


def test_invalid_single_run_exits_2_with_error_lines(tmp_path):
    res = decodelab(tmp_path, "model.ffn_act=relu", "workload.output_len=1", "tracking=off")
    assert res.rc == 2, res.explain()
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 2, res.err
    assert any("model.ffn_act='relu'" in ln for ln in errors)
    assert any("workload.output_len=1" in ln for ln in errors)
    assert "Traceback" not in res.text
    assert read_result(the_run_dir(tmp_path))["status"] == "invalid"


def test_invalid_single_run_is_recorded_and_exits_2(tmp_path):
    """Bad input is a result too: recorded in MLflow with its reason, then exit status 2."""
    res = decodelab(tmp_path, "workload.batch_size=0")
    assert res.rc == 2, res.explain()
    (run,) = all_runs(tmp_path)
    assert run.data.tags["status"] == "invalid"
    assert "workload.batch_size=0" in run.data.tags["reason"]
    assert (the_run_dir(tmp_path) / "mlflow_run_id").read_text().strip() == run.info.run_id


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
    res = decodelab(tmp_path, "-m", "tracking=server", f"tracking.uri={DEAD_SERVER}",
                    "model=llama3_2_1b,llama3_2_3b", "quiet=true", env=FAIL_FAST)
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
    assert "TPOT" not in res.out                # quiet: no table
    d = the_run_dir(tmp_path)
    assert read_result(d)["status"] == "ok"
    assert not (d / "mlflow_run_id").exists()
    assert not db_path(tmp_path).exists()


# --------------------------------------------------------------------------- multirun


@pytest.mark.slow
def test_joblib_multirun_parent_and_children(joblib_sweep):
    cwd, res = joblib_sweep
    assert "Joblib.Parallel" in res.text and "is launching 20 jobs" in res.text
    assert "Traceback" not in res.text
    runs = all_runs(cwd)
    parents, children = split_sweep(runs)
    assert len(parents) == 1, [r.info.run_name for r in parents]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in parent.data.tags
    assert parent.data.tags["git_commit"]
    assert "model=" + ",".join(SWEEP_MODELS) in parent.data.tags["overrides"]
    assert len(children) == 20, len(children)
    assert {c.data.tags.get("mlflow.parentRunId") for c in children} == {parent.info.run_id}
    pairs = [(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children]
    assert len(set(pairs)) == 20, sorted(pairs)
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
    assert len(dirs) == 20
    ids = {d.joinpath("mlflow_run_id").read_text().strip() for d in dirs}
    assert ids == {c.info.run_id for c in children}
    for d in dirs:
        assert read_result(d)["status"] in ("ok", "infeasible")
    (sweep_dir,) = {d.parent for d in dirs}
    assert (sweep_dir / "mlflow_parent_run_id").read_text().strip() == parent.info.run_id


def test_basic_launcher_multirun(tmp_path):
    res = decodelab(tmp_path, "-m", "model=llama3_2_1b,llama3_1_8b", "workload.batch_size=4",
                    "quiet=true")
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
    assert not run_dirs(tmp_path)               # a multirun writes under outputs/multirun only


def test_invalid_job_does_not_stop_a_sweep(tmp_path):
    res = decodelab(tmp_path, "-m", "model=llama3_2_1b", "workload.output_len=1,8", "quiet=true")
    assert res.rc == 0, res.explain()
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    status = {c.data.params["workload.output_len"]: c.data.tags for c in children}
    assert status["8"]["status"] == "ok"
    assert status["1"]["status"] == "invalid" and "workload.output_len" in status["1"]["reason"]


# --------------------------------------------------------------------------- user config dirs


def test_example_user_conf_files_are_named_after_their_stem():
    files = sorted(USER_CONF.glob("*/*.yaml"))
    groups = {p.parent.name for p in files}
    assert {"model", "hardware"} <= groups
    for p in files:
        cfg = yaml.safe_load(p.read_text())
        assert cfg["name"] == p.stem, p
        # a user file with a project file's name would be ambiguous on the search path
        assert p.stem not in group_options(p.parent.name), p


def test_example_user_conf_via_searchpath(tmp_path):
    res = decodelab(tmp_path, searchpath(USER_CONF), "model=my_model", "hardware=my_chip",
                    "tracking=off")
    assert res.rc == 0, res.explain()
    assert has_title(res.out, "my_model | my_chip tp1 | full | default | b1 4096+128"), res.out
    assert "TPOT" in table_rows(res.out)
    rec = read_result(the_run_dir(tmp_path))
    assert rec["status"] == "ok", rec["reason"]
    model, hw = rec["config"]["model"], rec["config"]["hardware"]
    mine = yaml.safe_load((USER_CONF / "model" / "my_model.yaml").read_text())
    for k, v in mine.items():
        assert model[k] == v, k
    # my_chip inherits h100_sxm through its defaults list and changes only the memory tier
    h100 = yaml.safe_load((CONF / "hardware" / "h100_sxm.yaml").read_text())
    chip = yaml.safe_load((USER_CONF / "hardware" / "my_chip.yaml").read_text())
    assert chip["defaults"] == ["h100_sxm", "_self_"]
    for k, v in h100.items():
        if k not in chip and k != "tensor_parallel":
            assert hw[k] == v, k
    assert hw["name"] == "my_chip" and hw["execution"] == "gpu" and hw["tensor_parallel"] == 1
    assert hw["tiers"] == [{"name": "hbm", "capacity_gib": 140.4, "bandwidth_gb_s": 4800.0}]
    assert not db_path(tmp_path).exists()
    # more HBM bandwidth than an H100: the same model decodes faster on my_chip
    base = decodelab(tmp_path, searchpath(USER_CONF), "model=my_model", "tracking=off",
                     "quiet=true")
    assert base.rc == 0, base.explain()
    (h100_dir,) = [d for d in run_dirs(tmp_path) if read_result(d)["config"]["hardware"]["name"]
                   == "h100_sxm"]
    assert rec["metrics"]["tpot_ms"] < read_result(h100_dir)["metrics"]["tpot_ms"]


def test_user_chip_and_system_in_a_sweep(tmp_path):
    """Llama-3.1-70B in BF16 does not fit one H100 (80 GB) but fits one H200 (141 GB); the
    8-chip system built on my_chip shards it TP8."""
    res = decodelab(tmp_path, "-m", searchpath(USER_CONF), "model=llama3_1_70b",
                    "hardware=h100_sxm,my_chip,my_chip_x8", "quiet=true")
    assert res.rc == 0, res.explain()
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and len(children) == 3
    runs = {c.data.params["hardware.name"]: c for c in children}
    assert runs["h100_sxm"].data.tags["status"] == "infeasible"
    assert "memory" in runs["h100_sxm"].data.tags["reason"]
    assert runs["my_chip"].data.tags["status"] == "ok"
    assert runs["my_chip"].data.metrics["mem_hbm_pct"] > 90
    x8 = runs["my_chip_x8"]
    assert x8.data.tags["status"] == "ok"
    assert x8.data.params["hardware.tensor_parallel"] == "8"
    assert x8.data.params["hardware.tiers.0.capacity_gib"] == "140.4"     # from my_chip
    assert x8.data.params["hardware.launch_us"] == "4.0"                  # from h100_sxm
    assert x8.data.metrics["tpot_ms"] < runs["my_chip"].data.metrics["tpot_ms"]


def test_config_dir_lists_user_options_in_help(tmp_path):
    res = decodelab(tmp_path, "--config-dir", str(USER_CONF), "--help")
    assert res.rc == 0, res.explain()
    groups = help_groups(res.out)
    assert "my_model" in groups["model"] and "llama3_1_8b" in groups["model"]
    assert "my_chip" in groups["hardware"] and "h100_sxm" in groups["hardware"]


def test_primary_config_with_searchpath(tmp_path):
    """A user's own primary config: the project's config + the user's components, tracked."""
    conf = tmp_path / "my_configs"
    conf.mkdir()
    (conf / "h200_study.yaml").write_text(
        "defaults:\n"
        "  - config\n"
        "  - override model: my_model\n"
        "  - override hardware: my_chip\n"
        "  - _self_\n"
        "hydra:\n"
        "  searchpath:\n"
        f"    - file://{USER_CONF}\n"
        "workload:\n"
        "  batch_size: 4\n")
    res = decodelab(tmp_path, "--config-dir", str(conf), "--config-name", "h200_study")
    assert res.rc == 0, res.explain()
    assert has_title(res.out, "my_model | my_chip tp1 | full | default | b4 4096+128"), res.out
    (run,) = all_runs(tmp_path)             # the project's MLflow callback still applies
    assert run.data.tags["status"] == "ok"
    assert run.data.tags["component.model"] == "my_model"
    assert run.data.params["hardware.name"] == "my_chip"
    assert run.data.params["workload.batch_size"] == "4"
    assert (the_run_dir(tmp_path) / "mlflow_run_id").is_file()


def test_sweep_includes_user_model(tmp_path):
    res = decodelab(tmp_path, "-m", searchpath(USER_CONF), "model=my_model,llama3_1_8b",
                    "hardware=my_chip,h100_sxm", "quiet=true")
    assert res.rc == 0, res.explain()
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    pairs = {(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children}
    assert pairs == set(product(("my_model", "llama3_1_8b"), ("my_chip", "h100_sxm")))
    assert all(c.data.tags["status"] == "ok" for c in children)


def test_example_primary_sweep_config(tmp_path):
    """examples/user_conf/my_sweep.yaml: a primary config of one's own that sweeps."""
    res = decodelab(tmp_path, "-m", "--config-dir", str(USER_CONF), "--config-name", "my_sweep",
                    "quiet=true")
    assert res.rc == 0, res.explain()
    assert "Launching 4 jobs locally" in res.text
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    pairs = {(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children}
    assert pairs == set(product(("my_model", "llama3_1_8b"), ("my_chip", "h100_sxm")))
    assert all(c.data.params["workload.prompt_len"] == "2048" for c in children)
    assert all(c.data.tags["status"] == "ok" for c in children)


def test_example_optimizations_and_workload(tmp_path):
    res = decodelab(tmp_path, "-m", searchpath(USER_CONF), "optimizations=no_graphs,default",
                    "workload=chat", "tracking=off", "quiet=true")
    assert res.rc == 0, res.explain()
    recs = {r["config"]["optimizations"]["name"]: r for r in map(read_result, job_dirs(tmp_path))}
    assert set(recs) == {"no_graphs", "default"}
    assert all(r["status"] == "ok" for r in recs.values())
    opts = recs["no_graphs"]["config"]["optimizations"]
    default = recs["default"]["config"]["optimizations"]
    assert opts["cuda_graphs"] is False and default["cuda_graphs"] is True
    assert {k: v for k, v in opts.items() if k not in ("name", "cuda_graphs")} == \
        {k: v for k, v in default.items() if k not in ("name", "cuda_graphs")}
    chat = yaml.safe_load((USER_CONF / "workload" / "chat.yaml").read_text())
    w = recs["no_graphs"]["config"]["workload"]
    assert {k: w[k] for k in chat} == chat
    assert w["weight_dtype"] == "bf16"                     # schema default
    m_off, m_on = recs["no_graphs"]["metrics"], recs["default"]["metrics"]
    assert m_off["tpot_launch_sync_ms"] > m_on["tpot_launch_sync_ms"]
    assert m_off["tpot_ms"] > m_on["tpot_ms"]
    assert m_off["tpot_memory_ms"] == pytest.approx(m_on["tpot_memory_ms"])


def test_model_written_at_test_time(tmp_path, default_run):
    """A model added with YAML only behaves exactly like a built-in one of the same shape."""
    conf = tmp_path / "conf"
    write_model(conf, "copy_of_8b")
    write_model(conf, "tiny", n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, head_dim=64,
                ffn_dim=512, vocab_size=1000, max_context=8192, tied_embeddings=True)
    res = decodelab(tmp_path, "-m", searchpath(conf), "model=copy_of_8b,tiny", "tracking=off",
                    "quiet=true")
    assert res.rc == 0, res.explain()
    recs = {r["config"]["model"]["name"]: r for r in map(read_result, job_dirs(tmp_path))}
    assert set(recs) == {"copy_of_8b", "tiny"}
    assert all(r["status"] == "ok" for r in recs.values())
    builtin = read_result(the_run_dir(default_run[0]))
    for k, v in builtin["metrics"].items():
        assert recs["copy_of_8b"]["metrics"][k] == pytest.approx(v, rel=1e-12), k
    assert recs["tiny"]["metrics"]["tpot_ms"] < builtin["metrics"]["tpot_ms"]
    assert recs["tiny"]["metrics"]["mem_hbm_gib"] < 0.1


def test_wrong_field_name_in_user_yaml(tmp_path):
    conf = tmp_path / "conf"
    write_model(conf, "typo", n_kv_head=8)
    res = decodelab(tmp_path, searchpath(conf), "model=typo", "tracking=off")
    assert res.rc == 1, res.explain()
    assert "In 'model/typo': ConfigKeyError raised while composing config" in res.err
    assert "Key 'n_kv_head' not in 'ModelConfig'" in res.err
    assert "full_key: model.n_kv_head" in res.err
    assert not (tmp_path / "outputs").exists()      # rejected before any job ran


def test_wrong_field_type_in_user_yaml(tmp_path):
    conf = tmp_path / "conf"
    write_model(conf, "badtype", d_model="4k")
    res = decodelab(tmp_path, searchpath(conf), "model=badtype", "tracking=off")
    assert res.rc == 1, res.explain()
    assert "In 'model/badtype': ValidationError raised while composing config" in res.err
    assert "Value '4k' of type 'str' could not be converted to Integer" in res.err
    assert "full_key: model.d_model" in res.err
    assert not (tmp_path / "outputs").exists()


def test_wrong_override_on_the_command_line(tmp_path):
    res = decodelab(tmp_path, "model.n_kv_head=8", "tracking=off")
    assert res.rc == 1
    assert "Could not override 'model.n_kv_head'" in res.err
    assert "Key 'n_kv_head' not in 'ModelConfig'" in res.err
    res = decodelab(tmp_path, "workload.batch_size=eight", "tracking=off")
    assert res.rc == 1
    assert "Value 'eight' of type 'str' could not be converted to Integer" in res.err
    res = decodelab(tmp_path, "model=no_such_model", "tracking=off")
    assert res.rc == 1
    assert "Could not find 'model/no_such_model'" in res.err
    assert "llama3_1_8b" in res.err              # Hydra lists the available options
    assert not (tmp_path / "outputs").exists()


def test_missing_required_field_is_invalid_input(tmp_path):
    conf = tmp_path / "conf"
    path = write_model(conf, "incomplete")
    cfg = yaml.safe_load(path.read_text())
    del cfg["ffn_dim"]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = decodelab(tmp_path, searchpath(conf), "model=incomplete", "tracking=off")
    assert "Traceback" not in res.text, res.explain()
    assert res.rc == 2, res.explain()
    assert any(ln.startswith("error: ") and "model.ffn_dim" in ln for ln in res.err.splitlines())
    assert read_result(the_run_dir(tmp_path))["status"] == "invalid"


def test_missing_required_field_does_not_break_a_sweep(tmp_path):
    conf = tmp_path / "conf"
    path = write_model(conf, "incomplete")
    cfg = yaml.safe_load(path.read_text())
    del cfg["ffn_dim"]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = decodelab(tmp_path, "-m", searchpath(conf), "model=incomplete,llama3_2_1b",
                    "quiet=true")
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", res.explain()
    status = {c.data.params["model.name"]: c.data.tags for c in children}
    assert status["llama3_2_1b"]["status"] == "ok"
    assert status["incomplete"]["status"] == "invalid"
    assert "model.ffn_dim" in status["incomplete"]["reason"]
    assert res.rc == 0, res.explain()


def test_every_subcommand_has_help(tmp_path):
    from framework.cli import SUBCOMMANDS
    for name in SUBCOMMANDS:
        res = decodelab(tmp_path, name, "--help")
        assert res.rc == 0 and f"decodelab {name}" in res.out, (name, res.explain())
        assert "Traceback" not in res.text


def test_claims_what_if_override_is_applied_and_labelled(tmp_path):
    """`decodelab claims ID KEY=VALUE`: the override reaches every job, the table says it is a
    what-if, and the MLflow run carries it; a misspelled key is one error line."""
    base = decodelab(tmp_path, "claims", "C5", "--no-track")
    fast = decodelab(tmp_path, "claims", "C5", "hardware.tiers.1.bandwidth_gb_s=3200")
    assert base.rc in (0, 1) and fast.rc in (0, 1), (base.explain(), fast.explain())
    assert "WHAT-IF" in fast.out and "WHAT-IF" not in base.out

    def tok_s(res):
        row = next(line for line in res.out.splitlines() if "tok/s per user" in line)
        return float(row.split("│")[4])
    assert tok_s(fast) > 1.5 * tok_s(base)          # twice the HBM bandwidth, weight-bound
    runs = all_runs(tmp_path)
    assert [r.data.tags.get("what_if") for r in runs] == ["hardware.tiers.1.bandwidth_gb_s=3200"]
    bad = decodelab(tmp_path, "claims", "C5", "hardware.fill_drian_us=1", "--no-track")
    assert bad.rc == 2 and bad.out.startswith("error:") and "fill_drian_us" in bad.out, bad.explain()
    assert len(bad.text.strip().splitlines()) == 1 and "Traceback" not in bad.text


def test_numba_cache_dir_follows_the_jitted_sources(tmp_path):
    """framework/__init__.py keys Numba's cache by a hash of the jitted sources (an edit of
    kernel.py can never leave serving_kernel.py a stale inlined step); a user's own
    NUMBA_CACHE_DIR is kept."""
    code = "import framework, os; print(os.environ['NUMBA_CACHE_DIR'])"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert re.fullmatch(re.escape(str(tmp_path / "xdg" / "decodelab" / "numba")) + r"/[0-9a-f]{16}",
                        out), out
    assert Path(out).is_dir()
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == str(tmp_path / "mine")
