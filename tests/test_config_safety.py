"""Config files are data (issue 40): a config file, search path, sweep file or override that would
make Hydra run code (a `_target_`, a `hydra.callbacks` entry, a logging factory, an environment
variable, a pickle) or expand without bound (a YAML alias bomb) is one `error:` line naming the
file and the key, exit status 2, nothing written and nothing run. The project's own callback
still records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import CONF, USER_CONF, all_runs, decodelab, searchpath, write_model
from decodelab.config import safety
from decodelab.errors import ConfigError
from decodelab.paths import SWEEPS_DIR


def evil_model(a: Path, b: Path) -> str:
    """A working model (llama3_1_8b's shape) that also copies A over B when Hydra instantiates
    its callbacks: `# @package _global_` lets one file set both."""
    model = yaml.safe_load((CONF / "model" / "llama3_1_8b.yaml").read_text())
    model["name"] = "evil"
    callbacks = {"x": {"_target_": "shutil.copyfile", "src": str(a), "dst": str(b)}}
    body = {"model": model, "hydra": {"callbacks": callbacks}}
    return "# @package _global_\n" + yaml.safe_dump(body, sort_keys=False)


def _bait(tmp_path: Path) -> tuple:
    """(A, B): B must still say 'original' after a refused run."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.write_text("pwned\n")
    b.write_text("original\n")
    return a, b


def _user_file(root: Path, rel: str, text: str) -> Path:
    p = root / "uc" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _refused(res, *words: str) -> str:
    """Exit 2, exactly one `error:` line holding `words`, no traceback; returns the line."""
    assert res.rc == 2, res.explain()
    lines = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.explain()
    assert "Traceback" not in res.text, res.explain()
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _nothing_written(cwd: Path, b: Path) -> None:
    assert b.read_text() == "original\n"
    assert not (cwd / "outputs").exists()


# --------------------------------------------------------------------------- hydra.callbacks


def test_callback_in_a_model_on_the_search_path_is_refused(tmp_path):
    a, b = _bait(tmp_path)
    f = _user_file(tmp_path, "model/evil.yaml", evil_model(a, b))
    res = decodelab(tmp_path, "model=evil", searchpath(tmp_path / "uc"), "tracking=off")
    _refused(res, str(f), "hydra.callbacks.x._target_=shutil.copyfile", "MLflowCallback")
    _nothing_written(tmp_path, b)


def test_callback_in_a_model_of_a_config_dir_multirun_is_refused(tmp_path):
    a, b = _bait(tmp_path)
    f = _user_file(tmp_path, "model/evil.yaml", evil_model(a, b))
    res = decodelab(tmp_path, "-m", "--config-dir", str(tmp_path / "uc"), "model=evil,llama3_2_1b")
    _refused(res, str(f), "hydra.callbacks.x._target_")
    _nothing_written(tmp_path, b)


def test_callback_in_a_file_no_override_names_is_refused(tmp_path):
    """Any YAML of the folder counts: a later job, a defaults entry or another group may load it."""
    a, b = _bait(tmp_path)
    f = _user_file(tmp_path, "hydra/callbacks/copy.yaml", "x:\n  _target_: shutil.copyfile\n")
    write_model(tmp_path / "uc", "mine")
    res = decodelab(tmp_path, "model=mine", searchpath(tmp_path / "uc"), "tracking=off")
    _refused(res, str(f), "hydra.callbacks.x._target_=shutil.copyfile")
    _nothing_written(tmp_path, b)


def test_callback_as_a_command_line_override_is_refused(tmp_path):
    a, b = _bait(tmp_path)
    res = decodelab(
        tmp_path,
        "+hydra.callbacks.x._target_=shutil.copyfile",
        f"+hydra.callbacks.x.src={a}",
        f"+hydra.callbacks.x.dst={b}",
        "tracking=off",
    )
    _refused(res, "the command line", "hydra.callbacks.x._target_=shutil.copyfile")
    _nothing_written(tmp_path, b)


def test_callback_in_a_sweep_files_params_is_refused(tmp_path):
    a, b = _bait(tmp_path)
    sweep = {
        "defaults": ["config", "_self_"],
        "hydra": {"sweeper": {"params": {"+hydra.callbacks.x._target_": "shutil.copyfile"}}},
    }
    f = _user_file(tmp_path, "my_sweep.yaml", yaml.safe_dump(sweep))
    res = decodelab(tmp_path, "-m", "--config-dir", str(f.parent), "--config-name", "my_sweep")
    _refused(res, str(f), "hydra.callbacks.x._target_=shutil.copyfile")
    _nothing_written(tmp_path, b)


@pytest.mark.slow
def test_hydra_run_refuses_what_the_scan_missed(tmp_path, monkeypatch):
    """The safety net: with the scan of files and overrides off, Hydra's own run refuses the
    composed config before it instantiates a callback (decodelab.apps.run.DataOnlyCallbacks)."""
    a, b = _bait(tmp_path)
    _user_file(tmp_path, "model/evil.yaml", evil_model(a, b))
    monkeypatch.setattr(safety, "check_sources", lambda *args, **kwargs: None)
    for mode in ([], ["-m"]):
        res = decodelab(tmp_path, *mode, "model=evil", searchpath(tmp_path / "uc"), "tracking=off")
        _refused(res, "the composed config", "hydra.callbacks.x._target_=shutil.copyfile")
        _nothing_written(tmp_path, b)


# --------------------------------------------------------------------------- other hooks


@pytest.mark.parametrize(
    "rel, text, words",
    [
        ("model/target.yaml", "name: target\n_target_: os.system\n", ["model._target_=os.system"]),
        (
            "hardware/target_hw.yaml",
            "defaults: [h100_sxm, _self_]\nname: t\nx:\n  _target_: os.getcwd\n",
            ["hardware.x._target_"],
        ),
        (
            "model/partial.yaml",
            "name: p\nx:\n  _partial_: true\n",
            ["model.x._partial_", "instantiation key"],
        ),
        ("model/args.yaml", "name: p\nx:\n  _args_: [1]\n", ["model.x._args_"]),
        (
            "model/env.yaml",
            "# @package _global_\nhydra:\n  job:\n    env_set:\n      PYTHONPATH: /tmp/evil\n",
            ["hydra.job.env_set.PYTHONPATH=/tmp/evil", "OMP_NUM_THREADS"],
        ),
        (
            "hydra/job_logging/evil.yaml",
            "version: 1\nhandlers:\n  h:\n    class: shutil.copyfile\n",
            ["hydra.job_logging.handlers.h.class=shutil.copyfile", "logging.StreamHandler"],
        ),
        (
            "hydra/job_logging/factory.yaml",
            "version: 1\nformatters:\n  f:\n    (): os.getcwd\n",
            ["hydra.job_logging.formatters.f.()=os.getcwd"],
        ),
        (
            "model/ext.yaml",
            "name: e\nstream: ext://os.system\n",
            ["model.stream=ext://os.system", "ext://sys.stdout"],
        ),
        (
            "hydra/launcher/slurm.yaml",
            "_target_: hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher\nsetup: [curl x | sh]\n",
            ["hydra.launcher.setup", "shell lines"],
        ),
        (
            "hydra/launcher/other.yaml",
            "_target_: hydra_plugins.evil.Launcher\n",
            ["hydra.launcher._target_=hydra_plugins.evil.Launcher", "JoblibLauncher"],
        ),
        (
            "model/relocate.yaml",
            "defaults:\n  - /model@hydra.job: llama3_1_8b\n  - _self_\nname: r\n",
            ["model@hydra.job", "Hydra's own config"],
        ),
    ],
)
def test_code_in_a_user_file_is_refused(tmp_path, rel, text, words):
    f = _user_file(tmp_path, rel, text)
    res = decodelab(tmp_path, searchpath(tmp_path / "uc"), "tracking=off")
    _refused(res, str(f), *words)
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "override, words",
    [
        ("+model._target_=os.system", ["model._target_=os.system"]),
        ("hydra.job.env_set.LD_PRELOAD=/tmp/x.so", ["hydra.job.env_set.LD_PRELOAD"]),
        ("+hydra.job_logging.handlers.h.class=os.getcwd", ["hydra.job_logging.handlers.h.class=os.getcwd"]),
        ("hydra.callbacks={x:{_target_:os.getcwd}}", ["hydra.callbacks.x._target_=os.getcwd"]),
        ("model@hydra.job=llama3_1_8b", ["model@hydra.job=llama3_1_8b", "Hydra's own config"]),
        ("+hydra.launcher.setup=[id]", ["hydra.launcher.setup", "shell lines"]),
    ],
)
def test_code_in_an_override_is_refused(tmp_path, override, words):
    res = decodelab(tmp_path, override, "tracking=off")
    _refused(res, "the command line", *words)
    assert not (tmp_path / "outputs").exists()


def test_a_pickled_config_is_refused(tmp_path):
    (tmp_path / "config.pickle").write_bytes(b"not read")
    res = decodelab(tmp_path, "--experimental-rerun", str(tmp_path / "config.pickle"))
    _refused(res, "--experimental-rerun", "pickle")


def test_alias_bomb_is_refused_before_hydra_reads_it(tmp_path):
    """A billion-laughs model (10^10 nodes once expanded; Hydra takes it for ever): refused from
    the node graph, without expanding it. A process, so a regression times out instead of
    hanging the suite."""
    lines = ["name: bomb", "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    f = _user_file(tmp_path, "model/bomb.yaml", "\n".join(lines) + "\n")
    res = decodelab(
        tmp_path, "model=bomb", searchpath(tmp_path / "uc"), "tracking=off", process=True, timeout=120
    )
    _refused(res, str(f), "YAML aliases", "100,000")
    assert not (tmp_path / "outputs").exists()


def test_self_referring_alias_is_refused(tmp_path):
    f = _user_file(tmp_path, "model/loop.yaml", "name: loop\nx: &x [1, *x]\n")
    res = decodelab(tmp_path, "-m", "--config-dir", str(tmp_path / "uc"), "model=loop")
    _refused(res, str(f), "refers to its own anchor")


def test_a_few_aliases_are_data(tmp_path):
    """Anchors and merge keys that add a handful of nodes are fine."""
    f = tmp_path / "x.yaml"
    f.write_text("name: x\nbase: &b {a: 1, b: 2}\nother:\n  <<: *b\n  c: 3\n")
    assert safety.check_file(f) == {"name": "x", "base": {"a": 1, "b": 2}, "other": {"a": 1, "b": 2, "c": 3}}


# --------------------------------------------------------------------------- what stays allowed


@pytest.mark.slow
def test_the_projects_callback_still_records(tmp_path):
    res = decodelab(tmp_path, "model=llama3_2_1b", "tracking.background=false", "quiet=true")
    assert res.rc == 0, res.explain()
    (run,) = all_runs(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["component.model"] == "llama3_2_1b"


def test_shipped_and_example_configs_are_data(tmp_path):
    """No false alarm: the example user configs, every shipped sweep folder, and the composed
    config with each launcher decodelab ships or documents."""
    safety.check_sources(str(USER_CONF), [searchpath(USER_CONF), "model=my_model"])
    safety.check_sources(str(SWEEPS_DIR), ["hydra/launcher=joblib"])
    from decodelab.config.compose import context
    from hydra import compose

    with context():
        for launcher in ("basic", "joblib"):
            overrides = [f"hydra/launcher={launcher}", "hydra.job.env_copy=[HOME]"]
            safety.check_config(compose("config", overrides, return_hydra_config=True))


def test_thread_counts_and_a_ray_working_dir_are_data():
    safety.check_overrides(
        ["hydra.job.env_set.OMP_NUM_THREADS=1", "+hydra.launcher.ray.init.runtime_env.working_dir=."]
    )
    with pytest.raises(safety.CodeInConfig, match="runtime_env.pip"):
        safety.check_overrides(["+hydra.launcher.ray.init.runtime_env.pip=[evil]"])


def test_the_python_api_check_raises_config_error(tmp_path):
    a, b = _bait(tmp_path)
    f = _user_file(tmp_path, "model/evil.yaml", evil_model(a, b))
    with pytest.raises(ConfigError, match=f"{f}: hydra.callbacks.x._target_=shutil.copyfile"):
        safety.check_sources(None, ["model=evil", searchpath(tmp_path / "uc")])
    with pytest.raises(ConfigError, match="the composed config: model._target_"):
        safety.check_config({"model": {"_target_": "os.system"}})
    assert b.read_text() == "original\n"
