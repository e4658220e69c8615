"""A sweep's choices of config groups composed from a few compositions (config.derive, issue 43):
each config built so is Hydra's own composition of that choice, node for node; an option whose
YAML writes elsewhere is left to Hydra; a worker given the chunks composes nothing."""

from __future__ import annotations

import pickle

from decodelab.config import composition as CO
from decodelab.config.plan import make_plan
from decodelab.runs import items
from decodelab.runs.sweep import chunks
from omegaconf import OmegaConf


def _types(cfg, path=""):
    """(node class, ref type, object type, flags) of every node: what typed overrides see."""
    out = {}
    for k in cfg.keys() if OmegaConf.is_dict(cfg) else range(len(cfg)):
        n = cfg._get_node(k)
        p = f"{path}.{k}"
        meta = n._metadata
        out[p] = (type(n).__name__, meta.ref_type, getattr(meta, "object_type", None), meta.flags)
        if OmegaConf.is_config(n) and not (n._is_none() or n._is_missing() or n._is_interpolation()):
            out.update(_types(n, p))
    return out


def _same_as_hydra(plan) -> None:
    with CO.hydra_context(plan.source) as loader:
        comp = CO.Composer(plan.source, loader)
        for groups, pickled in plan.bases.items():
            mine, hydra = pickle.loads(pickled), comp.base(groups)
            assert OmegaConf.to_yaml(mine) == OmegaConf.to_yaml(hydra), groups
            assert OmegaConf.to_container(mine, resolve=True) == OmegaConf.to_container(hydra, resolve=True)
            assert _types(mine) == _types(hydra), groups


def test_every_choice_of_a_sweep_is_hydra_s_composition(tmp_path):
    """scale/bench_1000: 5 models x 4 systems (dgx_h100 inherits h100_sxm's file), 20 choices
    from 8 compositions, each equal to Hydra's."""
    plan = make_plan("scale/bench_1000", [f"hydra.sweep.dir={tmp_path}", "tracking=off"])
    assert len(plan.bases) == len(set(plan.groups)) == 20
    _same_as_hydra(plan)


def test_an_option_writing_other_nodes_is_composed_by_hydra(tmp_path):
    """A model file with a package header (it sets a workload field too) or a defaults list
    naming another group is not built from pieces: the worker composes it, as before."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "globl.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /model/llama3_2_1b@model\n  - _self_\n"
        "model:\n  name: globl\nworkload:\n  batch_size: 3\n"
    )
    (tmp_path / "conf" / "model" / "pulls.yaml").write_text(
        "defaults:\n  - llama3_2_1b\n  - llama3_2_3b@_global_.speculative.draft\n  - _self_\nname: pulls\n"
    )
    (tmp_path / "conf" / "model" / "inherits.yaml").write_text(
        "defaults:\n  - llama3_2_1b\n  - _self_\nname: inherits\n"
    )
    plan = make_plan(
        None,
        [
            f"hydra.sweep.dir={tmp_path / 'sw'}",
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            "model=llama3_2_1b,globl,pulls,inherits",
            "hardware=h100_sxm,a100_sxm",
            "tracking=off",
        ],
    )
    built = {dict(o.split("=") for o in g)["model"] for g in plan.bases}
    assert built == {"llama3_2_1b", "inherits"}
    _same_as_hydra(plan)


def test_a_worker_given_the_chunks_composes_nothing(tmp_path, monkeypatch):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    plan = make_plan(
        None,
        [
            f"hydra.sweep.dir={tmp_path}",
            "model=llama3_2_1b,qwen2_5_0_5b",
            "workload.batch_size=1,4",
            "tracking=off",
        ],
    )
    composed = []
    real = ConfigLoaderImpl.load_configuration
    monkeypatch.setattr(
        ConfigLoaderImpl, "load_configuration", lambda *a, **k: composed.append(a) or real(*a, **k)
    )
    CO.reset()
    try:
        records = [
            r for c in chunks(plan, 2) for r in items.evaluate_items(plan.source, c, str(tmp_path), {})
        ]
    finally:
        CO.reset()  # the worker's Hydra context (run_sweep leaves it so too)
    assert composed == [] and len(records) == 4 and all(r["status"] == "ok" for r in records)


def _pid(*_args) -> list:
    import os

    return [os.getpid()]


def _warm_up_together(folder: str, n: int) -> int:
    """items.warm_up in each of `n` workers at once: each waits until all have started (else a
    worker that starts first and warms fast could take every warm-up task)."""
    import time
    from pathlib import Path

    pid = items.warm_up()
    (Path(folder) / str(pid)).touch()
    t0 = time.monotonic()
    while len(list(Path(folder).iterdir())) < n and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    return pid


def test_warm_workers_are_the_ones_that_run_the_sweep(tmp_path):
    """`decodelab sweep` starts its local workers before planning (Backend.warm: imports and
    Numba's start in each while the plan is composed); the sweep's chunks run in those."""
    from functools import partial
    from types import SimpleNamespace

    from decodelab.runs.backends import Backend

    plan = SimpleNamespace(source=None, sweep_dir="unused")
    with Backend("local", 2) as workers:
        workers.warm(partial(_warm_up_together, str(tmp_path), 2))
        warm = set(workers._warming)
        workers._warming = None
        ran = {
            pid for chunk in workers.map(plan, [[i] for i in range(6)], {}, False, fn=_pid) for pid in chunk
        }
    assert len(warm) == 2 and ran <= warm
