"""One flattening of a design's config (decodelab.output.flat): the results table, the MLflow
params of its run (from `decodelab sweep` and from the Hydra callback of `decodelab -m`) and
load_results hold the same keys with the same text."""

from __future__ import annotations

import json

import pytest
from conftest import cli, client, explain, job_dirs
from decodelab.output.flat import flat_params, param_text
from decodelab.output.table import read_table, table_row

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def test_the_rule():
    cfg = {
        "model": {"name": "m", "layer_pattern": [], "dims": {"d": 8}},
        "engine": {"versions": ["1.0.0rc3"], "batch_buckets": (1, 2)},
        "speculative": {"enabled": False, "draft": {"name": "x"}},
        "tracking": {"uri": "u"},
        "quiet": True,
        "claim": {"figure": 1},
        "seed": None,
    }
    assert flat_params(cfg) == {
        "model.name": "m",
        "model.layer_pattern": "[]",
        "model.dims.d": 8,
        "engine.versions": '["1.0.0rc3"]',
        "engine.batch_buckets": "[1, 2]",
        "speculative.enabled": False,
        "seed": None,
    }
    assert param_text([1, 2]) == "[1, 2]" and param_text(False) == "False"
    row = table_row({"config": cfg, "status": "ok", "metrics": {"tpot_ms": 1}}, job=0)
    assert {k: row[k] for k in flat_params(cfg)} == flat_params(cfg)


def _text(d: dict) -> dict:
    return {k: param_text(v) for k, v in d.items()}


def _params_of_run(tmp_path, h: str) -> dict:
    c = client(tmp_path)
    exp = c.get_experiment_by_name("decodelab").experiment_id
    (run,) = c.search_runs([exp], filter_string=f"tags.config_hash = '{h}'")
    return dict(run.data.params)


@pytest.mark.slow
def test_table_mlflow_and_load_results_flatten_alike(tmp_path):
    r = cli(
        tmp_path,
        "sweep",
        "model=llama3_2_1b",
        "workload.batch_size=1,2",
        "-j",
        "1",
        "-q",
        "--children",
        "all",
    )
    assert r.returncode == 0, explain(r)
    table_file = next((tmp_path / "outputs" / "multirun").rglob("results.parquet"))
    rec = json.loads((table_file.parent / "0" / "result.json").read_text())
    want = _text(flat_params(rec["config"]))
    assert want["engine.versions"].startswith('["') and want["model.layer_pattern"] == "[]"
    table = read_table(table_file)
    row = table[table.job == 0].iloc[0]
    assert {c for c in table.columns if "." in c} == set(want)
    assert _text({k: row[k] for k in want}) == want
    assert _params_of_run(tmp_path, rec["config_hash"]) == want

    m = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=3")  # the Hydra callback
    assert m.returncode == 0, explain(m)
    rec3 = json.loads((job_dirs(tmp_path)[0] / "result.json").read_text())
    assert _params_of_run(tmp_path, rec3["config_hash"]) == _text(flat_params(rec3["config"]))


@pytest.mark.slow
def test_load_results_of_result_files_flattens_alike(tmp_path):
    from decodelab.api import load_results

    r = cli(tmp_path, "-m", "model=llama3_2_1b", "workload.batch_size=1", "tracking.enabled=false")
    assert r.returncode == 0, explain(r)
    d = job_dirs(tmp_path)[0]
    rec = json.loads((d / "result.json").read_text())
    want = _text(flat_params(rec["config"]))
    df = load_results(d / "result.json")
    assert {c for c in df.columns if "." in c} == set(want)
    assert _text({k: df.iloc[0][k] for k in want}) == want
