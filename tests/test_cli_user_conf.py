"""Users' own config directories (docs/extending.md): models, chips, systems and primary configs
from a search path, in single runs and sweeps; mistakes in them are one clear line."""

from __future__ import annotations

import shutil
from itertools import product

import pytest
import yaml
from conftest import (
    CONF,
    ROOT,  # noqa: F401
    USER_CONF,
    all_runs,
    db_path,
    decodelab,
    group_options,
    has_title,
    help_groups,
    job_dirs,
    read_result,
    run_dirs,
    searchpath,
    split_sweep,
    table_rows,
    the_run_dir,
    write_model,
)
from decodelab.core import kernel as K  # noqa: F401
from decodelab.output.table import read_table

# MLflow's SQLAlchemy store, read back in this process, warns about its own ORM usage.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning"),
    pytest.mark.slow,
]


# --------------------------------------------------------------------------- user config dirs


def test_example_user_conf_files_are_named_after_their_stem():
    files = sorted(USER_CONF.glob("*/*.yaml"))
    groups = {p.parent.name for p in files}
    assert {"model", "hardware"} <= groups
    for p in files:
        cfg = yaml.safe_load(p.read_text())
        assert cfg["name"] == p.stem, p
        # the examples add options; a file with a project file's name would replace that file
        assert p.stem not in group_options(p.parent.name), p


def test_example_user_conf_via_searchpath(tmp_path):
    res = decodelab(tmp_path, searchpath(USER_CONF), "model=my_model", "hardware=my_chip", "tracking=off")
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
    assert hw["memory"] == {"hbm": {"capacity_gib": 139.8, "bandwidth_gb_s": 4800.0}}
    assert not db_path(tmp_path).exists()
    # more HBM bandwidth than an H100: the same model decodes faster on my_chip
    base = decodelab(tmp_path, searchpath(USER_CONF), "model=my_model", "tracking=off", "quiet=true")
    assert base.rc == 0, base.explain()
    (h100_dir,) = [
        d for d in run_dirs(tmp_path) if read_result(d)["config"]["hardware"]["name"] == "h100_sxm"
    ]
    assert rec["metrics"]["tpot_ms"] < read_result(h100_dir)["metrics"]["tpot_ms"]


def test_user_chip_and_system_in_a_sweep(tmp_path):
    """Llama-3.1-70B in BF16 does not fit one H100 (80 GB) but fits one H200 (141 GB); the
    8-chip system built on my_chip shards it TP8."""
    res = decodelab(
        tmp_path,
        "-m",
        searchpath(USER_CONF),
        "model=llama3_1_70b",
        "hardware=h100_sxm,my_chip,my_chip_x8",
        "quiet=true",
    )
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
    assert x8.data.params["hardware.memory.hbm.capacity_gib"] == "139.8"  # from my_chip
    assert x8.data.params["hardware.launch_us"] == "4.0"  # from h100_sxm
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
        "  batch_size: 4\n"
    )
    res = decodelab(tmp_path, "--config-dir", str(conf), "--config-name", "h200_study")
    assert res.rc == 0, res.explain()
    assert has_title(res.out, "my_model | my_chip tp1 | full | default | b4 4096+128"), res.out
    (run,) = all_runs(tmp_path)  # the project's MLflow callback still applies
    assert run.data.tags["status"] == "ok"
    assert run.data.tags["component.model"] == "my_model"
    assert run.data.params["hardware.name"] == "my_chip"
    assert run.data.params["workload.batch_size"] == "4"
    assert (the_run_dir(tmp_path) / "mlflow_run_id").is_file()


def test_sweep_includes_user_model(tmp_path):
    res = decodelab(
        tmp_path,
        "-m",
        searchpath(USER_CONF),
        "model=my_model,llama3_1_8b",
        "hardware=my_chip,h100_sxm",
        "quiet=true",
    )
    assert res.rc == 0, res.explain()
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    pairs = {(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children}
    assert pairs == set(product(("my_model", "llama3_1_8b"), ("my_chip", "h100_sxm")))
    assert all(c.data.tags["status"] == "ok" for c in children)


def test_example_primary_sweep_config(tmp_path):
    """examples/user_conf/my_sweep.yaml: a primary config of one's own that sweeps."""
    res = decodelab(tmp_path, "-m", "--config-dir", str(USER_CONF), "--config-name", "my_sweep", "quiet=true")
    assert res.rc == 0, res.explain()
    assert "Launching 4 jobs locally" in res.text
    parents, children = split_sweep(all_runs(tmp_path))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    pairs = {(c.data.params["model.name"], c.data.params["hardware.name"]) for c in children}
    assert pairs == set(product(("my_model", "llama3_1_8b"), ("my_chip", "h100_sxm")))
    assert all(c.data.params["workload.prompt_len"] == "2048" for c in children)
    assert all(c.data.tags["status"] == "ok" for c in children)


def test_example_optimizations_and_workload(tmp_path):
    res = decodelab(
        tmp_path,
        "-m",
        searchpath(USER_CONF),
        "optimizations=no_graphs,default",
        "workload=chat",
        "tracking=off",
        "quiet=true",
    )
    assert res.rc == 0, res.explain()
    recs = {r["config"]["optimizations"]["name"]: r for r in map(read_result, job_dirs(tmp_path))}
    assert set(recs) == {"no_graphs", "default"}
    assert all(r["status"] == "ok" for r in recs.values())
    opts = recs["no_graphs"]["config"]["optimizations"]
    default = recs["default"]["config"]["optimizations"]
    assert opts["cuda_graphs"] is False and default["cuda_graphs"] is True
    assert {k: v for k, v in opts.items() if k not in ("name", "cuda_graphs")} == {
        k: v for k, v in default.items() if k not in ("name", "cuda_graphs")
    }
    chat = yaml.safe_load((USER_CONF / "workload" / "chat.yaml").read_text())
    w = recs["no_graphs"]["config"]["workload"]
    assert {k: w[k] for k in chat} == chat
    assert w["weight_dtype"] == "bf16"  # schema default
    m_off, m_on = recs["no_graphs"]["metrics"], recs["default"]["metrics"]
    assert m_off["tpot_launch_sync_ms"] > m_on["tpot_launch_sync_ms"]
    assert m_off["tpot_ms"] > m_on["tpot_ms"]
    assert m_off["tpot_memory_ms"] == pytest.approx(m_on["tpot_memory_ms"])


def test_model_written_at_test_time(tmp_path, default_run):
    """A model added with YAML only behaves exactly like a built-in one of the same shape."""
    conf = tmp_path / "conf"
    write_model(conf, "copy_of_8b")
    write_model(
        conf,
        "tiny",
        n_layers=2,
        d_model=256,
        n_heads=4,
        n_kv_heads=2,
        head_dim=64,
        ffn_dim=512,
        vocab_size=1000,
        max_context=8192,
        tied_embeddings=True,
    )
    res = decodelab(tmp_path, "-m", searchpath(conf), "model=copy_of_8b,tiny", "tracking=off", "quiet=true")
    assert res.rc == 0, res.explain()
    recs = {r["config"]["model"]["name"]: r for r in map(read_result, job_dirs(tmp_path))}
    assert set(recs) == {"copy_of_8b", "tiny"}
    assert all(r["status"] == "ok" for r in recs.values())
    builtin = read_result(the_run_dir(default_run[0]))
    for k, v in builtin["metrics"].items():
        assert recs["copy_of_8b"]["metrics"][k] == pytest.approx(v, rel=1e-12), k
    assert recs["tiny"]["metrics"]["tpot_ms"] < builtin["metrics"]["tpot_ms"]
    assert recs["tiny"]["metrics"]["mem_hbm_gib"] < 0.1


def one_error(res) -> str:
    """The one `error:` line of a rejected command (exit 2, no traceback)."""
    assert res.rc == 2 and "Traceback" not in res.text, res.explain()
    (line,) = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    return line


def test_wrong_field_name_in_user_yaml(tmp_path):
    conf = tmp_path / "conf"
    path = write_model(conf, "typo", n_kv_head=8)
    line = one_error(decodelab(tmp_path, searchpath(conf), "model=typo", "tracking=off"))
    assert str(path) in line
    assert "model.n_kv_head: no such field; did you mean 'n_kv_heads'?" in line
    assert not (tmp_path / "outputs").exists()  # rejected before any job ran


def test_wrong_field_type_in_user_yaml(tmp_path):
    conf = tmp_path / "conf"
    path = write_model(conf, "badtype", d_model="4k")
    line = one_error(decodelab(tmp_path, searchpath(conf), "model=badtype", "tracking=off"))
    assert f"{path}: model.d_model=4k: wrong type, expected an integer" in line
    assert not (tmp_path / "outputs").exists()


def test_wrong_override_on_the_command_line(tmp_path):
    line = one_error(decodelab(tmp_path, "model.n_kv_head=8", "tracking=off"))
    assert "model.n_kv_head: no such field; did you mean 'n_kv_heads'?" in line
    line = one_error(decodelab(tmp_path, "workload.batch_size=eight", "tracking=off"))
    assert "workload.batch_size=eight: wrong type, expected an integer" in line
    line = one_error(decodelab(tmp_path, "model=no_such_model", "tracking=off"))
    assert "model=no_such_model: no such option" in line
    assert "llama3_1_8b" in line  # the available options
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
    assert not (tmp_path / "outputs").exists()  # refused before the run: nothing written


def test_missing_required_field_stops_a_sweep_before_it_runs(tmp_path):
    """A user file without a required field is bad input, checked for every job before any
    runs (as Hydra checks a multirun): one line naming the file and the field, nothing written."""
    conf = tmp_path / "conf"
    path = write_model(conf, "incomplete")
    cfg = yaml.safe_load(path.read_text())
    del cfg["ffn_dim"]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = decodelab(tmp_path, "-m", searchpath(conf), "model=incomplete,llama3_2_1b", "quiet=true")
    assert res.rc == 2 and "Traceback" not in res.text, res.explain()
    (line,) = res.err.splitlines()
    assert line.startswith("error: ") and str(path) in line and "model.ffn_dim" in line
    assert not (tmp_path / "outputs").exists()


def test_example_user_engine_sets_its_budget_by_chip(tmp_path):
    """examples/user_conf/engine/my_vllm.yaml: vLLM's file with 16384 tokens a step from 100 GiB
    of GPU memory up (docs/extending.md, "Add an engine, a workload or an optimization set")."""
    for hw, budget in (("b200_sxm", 16384), ("h100_sxm", 8192)):
        res = decodelab(
            tmp_path,
            searchpath(USER_CONF),
            "engine=my_vllm",
            f"hardware={hw}",
            "model=llama3_1_8b",
            "workload=closed_loop",
            "workload.n_requests=8",
            "workload.concurrency=2",
            "tracking=off",
        )
        assert res.rc == 0, res.explain()
        rec = read_result(the_run_dir(tmp_path))
        assert rec["status"] == "ok", rec["reason"]
        assert rec["config"]["engine"]["max_tokens_per_step"] == budget
        assert rec["config"]["engine"]["chunk_size"] == budget
        shutil.rmtree(tmp_path / "outputs")  # the next chip's run is then the only one


# --------------------------------------------------------------------------- a user file of a shipped name

SHIPPED_1B = (CONF / "model" / "llama3_2_1b.yaml").resolve()


def shadowing_conf(tmp_path):
    """A user folder whose model/llama3_2_1b.yaml replaces the shipped one: the 8B shape with 3
    layers (the shipped 1B has 16 layers of d_model 2048); and the note a run gives for it."""
    mine = write_model(tmp_path / "sh", "llama3_2_1b", n_layers=3).resolve()
    return mine.parent.parent, f"{mine} is used in place of the shipped {SHIPPED_1B}"


def is_users_1b(model: dict) -> bool:
    return model["name"] == "llama3_2_1b" and model["n_layers"] == 3 and model["d_model"] == 4096


@pytest.mark.parametrize("how", ["searchpath", "config-dir"])
def test_user_file_of_a_shipped_name_is_used_and_named(tmp_path, how):
    """Issue 40: the user's folder comes before conf/, and the run says which file it read."""
    conf, note = shadowing_conf(tmp_path)
    where = [searchpath(conf)] if how == "searchpath" else ["--config-dir", str(conf)]
    res = decodelab(tmp_path, *where, "model=llama3_2_1b", "tracking=off")
    assert res.rc == 0, res.explain()
    rec = read_result(the_run_dir(tmp_path))
    assert rec["status"] == "ok" and is_users_1b(rec["config"]["model"]), rec["config"]["model"]
    assert rec["notes"].count(note) == 1
    printed = " ".join(res.out.split())  # rich wraps long lines
    assert printed.count(f"note: {note}") == 1, res.out
    assert has_title(res.out, "llama3_2_1b | h100_sxm tp1 | full | default | b1 4096+128"), res.out


def test_no_note_without_a_user_file_of_a_shipped_name(tmp_path):
    res = decodelab(tmp_path, searchpath(USER_CONF), "model=my_model", "tracking=off", "quiet=true")
    assert res.rc == 0, res.explain()
    assert not any("in place of the shipped" in n for n in read_result(the_run_dir(tmp_path))["notes"])


def test_user_file_of_a_shipped_name_in_a_multirun(tmp_path):
    conf, note = shadowing_conf(tmp_path)
    res = decodelab(
        tmp_path,
        "-m",
        searchpath(conf),
        "model=llama3_2_1b",
        "workload.batch_size=1,2",
        "tracking=off",
        "quiet=true",
    )
    assert res.rc == 0, res.explain()
    recs = [read_result(d) for d in job_dirs(tmp_path)]
    assert sorted(r["config"]["workload"]["batch_size"] for r in recs) == [1, 2]
    assert all(r["status"] == "ok" and is_users_1b(r["config"]["model"]) for r in recs)
    assert all(r["notes"].count(note) == 1 for r in recs)


def _sweep_rows(tmp_path):
    (table,) = (tmp_path / "outputs" / "multirun").rglob("results.parquet")
    return read_table(table)


@pytest.mark.parametrize("how", ["searchpath", "sweep-file"])
def test_user_file_of_a_shipped_name_in_decodelab_sweep(tmp_path, how):
    """`decodelab sweep`: the user's file wins from hydra.searchpath and from the sweep file's folder."""
    conf, _ = shadowing_conf(tmp_path)
    (conf / "study.yaml").write_text(
        "defaults:\n  - config\n  - _self_\nhydra:\n  sweeper:\n    params:\n"
        "      model: llama3_2_1b\n      workload.batch_size: 1,2\n"
    )
    args = [searchpath(conf), "model=llama3_2_1b", "workload.batch_size=1,2"]
    res = decodelab(
        tmp_path, "sweep", *(args if how == "searchpath" else [str(conf / "study.yaml")]), "tracking=off"
    )
    assert res.rc == 0, res.explain()
    rows = _sweep_rows(tmp_path)
    assert len(rows) == 2 and set(rows["status"]) == {"ok"}
    assert set(rows["model.n_layers"]) == {3} and set(rows["model.d_model"]) == {4096}


def test_user_file_of_a_shipped_name_in_decodelab_grid(tmp_path):
    import decodelab as api

    conf, _ = shadowing_conf(tmp_path)
    res = decodelab(
        tmp_path, "grid", searchpath(conf), "model=llama3_2_1b", "workload.batch_size=1,2", "tracking=off"
    )
    assert res.rc == 0, res.explain()
    rows = _sweep_rows(tmp_path).sort_values("workload.batch_size")
    assert set(rows["status"]) == {"ok"}
    for b, tpot in zip(rows["workload.batch_size"], rows["tpot_ms"]):
        same = api.evaluate("model=llama3_1_8b", "model.n_layers=3", f"workload.batch_size={b}")
        assert tpot == pytest.approx(same.metrics["tpot_ms"], rel=1e-9)


@pytest.mark.parametrize("how", ["searchpath", "config_dir"])
def test_user_file_of_a_shipped_name_through_the_api(tmp_path, monkeypatch, how):
    import re

    import decodelab as api

    conf, note = shadowing_conf(tmp_path)
    monkeypatch.chdir(tmp_path)
    args, kwargs = ([searchpath(conf)], {}) if how == "searchpath" else ([], {"config_dir": str(conf)})
    with pytest.warns(UserWarning, match=re.escape(f"note: {note}")):
        r = api.evaluate(*args, "model=llama3_2_1b", **kwargs)
    same = api.evaluate("model=llama3_1_8b", "model.n_layers=3")
    shipped = api.evaluate("model=llama3_2_1b")
    assert r.status == "ok" and r.metrics["tpot_ms"] == pytest.approx(same.metrics["tpot_ms"], rel=1e-12)
    assert shipped.metrics["tpot_ms"] != pytest.approx(r.metrics["tpot_ms"], rel=1e-3)
    rows = api.sweep(searchpath(conf), "model=llama3_2_1b", "workload.batch_size=1,2")
    assert set(rows["model.n_layers"]) == {3}


def test_primary_config_is_decodelabs_unless_config_dir_holds_one(tmp_path):
    """Hydra reads the primary config from --config-dir or conf/, never from hydra.searchpath."""
    conf = tmp_path / "mine"
    conf.mkdir()
    (conf / "config.yaml").write_text((CONF / "config.yaml").read_text() + "workload:\n  batch_size: 3\n")
    note = f"{(conf / 'config.yaml').resolve()} is used in place of the shipped {(CONF / 'config.yaml').resolve()}"
    for where, batch in ((["--config-dir", str(conf)], 3), ([searchpath(conf)], 1)):
        res = decodelab(tmp_path, *where, "tracking=off", "quiet=true")
        assert res.rc == 0, res.explain()
        rec = read_result(the_run_dir(tmp_path))
        assert rec["config"]["workload"]["batch_size"] == batch, where
        assert (note in rec["notes"]) == (batch == 3), rec["notes"]
        shutil.rmtree(tmp_path / "outputs")
