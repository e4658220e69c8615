"""The `decodelab` command, one design: the metric table, result files, the MLflow run, overrides,
--cfg / --help, infeasible and invalid input. Every test runs the real program (its entry point
decodelab.apps.cli.main, in this process) with a pytest temporary directory as working directory
(outputs/ lands there); nothing is mocked: the MLflow store is read back with MlflowClient."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import (
    GROUPS,
    OK_FILES,
    all_runs,
    artifact_names,
    decodelab,
    group_options,
    has_title,
    help_groups,
    read_result,
    table_rows,
    the_run_dir,
)
from decodelab.core import kernel as K  # noqa: F401
from decodelab.kernel_layout import CAUSES

# MLflow's SQLAlchemy store, read back in this process, warns about its own ORM usage.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")


# --------------------------------------------------------------------------- default run


def test_default_run_prints_metric_table(default_run):
    _, res = default_run
    rows = table_rows(res.out)
    assert has_title(res.out, "llama3_1_8b | h100_sxm tp1 | full | default | b1 4096+128"), res.out
    for metric in (
        "TTFT",
        "TPOT",
        "tokens/s per user",
        "tokens/s aggregate",
        "% of roofline (Eq. 3)",
        "memory hbm per chip",
        "kernel calls per step",
    ):
        assert metric in rows, f"{metric!r} row missing from:\n{res.out}"
    assert re.fullmatch(r"\d+\.\d+ ms", rows["TTFT"]), rows["TTFT"]
    assert re.fullmatch(r"\d+\.\d+ ms", rows["TPOT"]), rows["TPOT"]
    assert re.fullmatch(r"\d+\.\d %", rows["% of roofline (Eq. 3)"])
    assert re.fullmatch(r"\d+\.\d+ GiB \(\d+ %\)", rows["memory hbm per chip"])
    for cause in CAUSES:  # the time breakdown: one row per cause
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
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", tags["mlflow.source.git.commit"]), tags[
        "mlflow.source.git.commit"
    ]
    assert tags["component.model"] == "llama3_1_8b"
    assert tags["component.hardware"] == "h100_sxm"
    assert tags["component.kv_policy"] == "full"
    assert tags["component.optimizations"] == "default"
    assert tags["component.workload"] == "decode"
    assert tags["component.execution"] == "gpu"
    assert params["model.name"] == "llama3_1_8b"
    assert params["hardware.name"] == "h100_sxm"
    assert params["hardware.tensor_parallel"] == "1"  # interpolation resolved
    assert params["hardware.memory.hbm.bandwidth_gb_s"] == "3350.0"  # tiers by name
    assert params["workload.batch_size"] == "1"
    assert params["model.n_layers"] == "32"
    assert not any(k.startswith("tracking.") for k in params)  # tracking settings are not params
    for m in (
        "tpot_ms",
        "ttft_ms",
        "pct_roofline",
        "tok_s_user",
        "tok_s_aggregate",
        "roofline_tok_s",
        "mem_hbm_gib",
        "n_kernel_calls_per_step",
    ):
        assert m in metrics, m
    for cause in CAUSES:
        assert f"tpot_{cause}_ms" in metrics and f"ttft_{cause}_ms" in metrics, cause
    assert metrics["tpot_ms"] > 0 and metrics["ttft_ms"] > metrics["tpot_ms"]
    assert 0 < metrics["pct_roofline"] <= 100
    # the breakdown explains the whole step time
    assert sum(metrics[f"tpot_{c}_ms"] for c in CAUSES) == pytest.approx(metrics["tpot_ms"], rel=1e-6)
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
    assert len(steps) == 1 + 128  # header + prefill + 127 decode steps
    assert (d / "breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    resolved = yaml.safe_load((d / "config_resolved.yaml").read_text())
    assert resolved["hardware"]["tensor_parallel"] == 1


# --------------------------------------------------------------------------- overrides


@pytest.mark.slow
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
    for section in ("model:", "hardware:", "workload:", "kv_policy:", "optimizations:", "tracking:"):
        assert re.search(rf"^{section}$", res.out, re.M), section
    cfg = yaml.safe_load(res.out)
    assert cfg["model"]["name"] == "llama3_1_8b" and cfg["model"]["n_layers"] == 32
    assert cfg["hardware"]["name"] == "h100_sxm"
    assert cfg["hardware"]["memory"] == {"hbm": {"capacity_gib": 79.22, "bandwidth_gb_s": 3350.0}}
    assert cfg["workload"]["batch_size"] == 1 and cfg["workload"]["prompt_len"] == 4096
    assert not (tmp_path / "outputs").exists()  # printing the config runs nothing
    res = decodelab(tmp_path, "--cfg", "job", "model=llama3_2_1b", "workload.batch_size=16")
    cfg = yaml.safe_load(res.out)
    assert cfg["model"]["name"] == "llama3_2_1b" and cfg["workload"]["batch_size"] == 16


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_invalid_single_run_exits_2_with_error_lines(tmp_path):
    res = decodelab(tmp_path, "model.ffn_act=relu", "workload.output_len=1", "tracking=off")
    assert res.rc == 2, res.explain()
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 2, res.err
    assert any("model.ffn_act='relu'" in ln for ln in errors)
    assert any("workload.output_len=1" in ln for ln in errors)
    assert "Traceback" not in res.text
    assert read_result(the_run_dir(tmp_path))["status"] == "invalid"


@pytest.mark.slow
def test_invalid_single_run_is_recorded_and_exits_2(tmp_path):
    """Bad input is a result too: recorded in MLflow with its reason, then exit status 2."""
    res = decodelab(tmp_path, "workload.batch_size=0")
    assert res.rc == 2, res.explain()
    (run,) = all_runs(tmp_path)
    assert run.data.tags["status"] == "invalid"
    assert "workload.batch_size=0" in run.data.tags["reason"]
    assert (the_run_dir(tmp_path) / "mlflow_run_id").read_text().strip() == run.info.run_id


def test_single_run_composes_its_config_once(tmp_path, monkeypatch):
    """The command-line check composes the run's config and the Hydra app runs on it (issue 43:
    one composition, not a check's two and Hydra's two more): the same files as before."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    real = ConfigLoaderImpl.load_configuration
    composed = []

    def counted(self, *a, **k):
        composed.append(a[1] if len(a) > 1 else k.get("overrides"))
        return real(self, *a, **k)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    res = decodelab(tmp_path, "model=llama3_2_1b", "workload.batch_size=2", "tracking=off")
    assert res.rc == 0, res.err
    assert composed == [["model=llama3_2_1b", "workload.batch_size=2", "tracking=off"]]
    run = the_run_dir(tmp_path)
    saved = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert saved["mode"] == "RUN" and saved["overrides"]["hydra"] == ["hydra.mode=RUN"]
    assert saved["overrides"]["task"] == ["model=llama3_2_1b", "workload.batch_size=2", "tracking=off"]
    assert yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["workload"]["batch_size"] == 2
    assert read_result(run)["status"] == "ok"
