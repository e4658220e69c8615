"""A design is resolved once at the edge (core.tree, modes.resolve) and the Python API sets a
design's field overrides on its base's resolved tree (config.composition.PlainBase): the configs
and the numbers must be Hydra's own, and the resolved design must not change under the modes."""

from __future__ import annotations

import copy
import pickle

import decodelab
import pytest
from conftest import compose_cfg
from decodelab.config.compose import compose
from decodelab.config.composition import design_config
from decodelab.core.tree import Tree, cached, freeze, leaf_keys, missing_keys, replace
from decodelab.modes.dispatch import evaluate
from omegaconf import OmegaConf


def test_tree_is_read_only_and_replace_shares_untouched_branches():
    t = freeze({"model": {"name": "m", "layers": [1, 2]}, "workload": {"batch_size": 1}})
    assert t.model.layers == (1, 2) and isinstance(t.model, Tree)
    for change in (
        lambda: setattr(t, "model", None),
        lambda: t.__setitem__("model", None),
        lambda: t.workload.update(batch_size=2),
        lambda: t.pop("model"),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    r = replace(t, {"workload.batch_size": 8, "new.field": {"x": [1]}})
    assert (r.workload.batch_size, t.workload.batch_size) == (8, 1)
    assert r.model is t.model  # untouched branch shared, not copied
    assert r.new.field.x == (1,) and r.to_dict()["new"] == {"field": {"x": [1]}}
    assert copy.deepcopy(r) is r and pickle.loads(pickle.dumps(r)) == r


def test_leaf_keys_are_omegaconf_s_and_follow_replace():
    raw = {"a": {"b": "???", "c": [1, "???", {"d": "???"}]}, "e": 2}
    t = freeze(raw)
    assert set(missing_keys(t)) == OmegaConf.missing_keys(OmegaConf.create(raw))
    assert missing_keys(replace(t, {"a.b": 3})) == ["a.c[1]", "a.c[2].d"]
    assert missing_keys(t) == ["a.b", "a.c[1]", "a.c[2].d"]  # the memo of t is t's own
    big = lambda v: isinstance(v, int) and v > 1  # noqa: E731
    assert leaf_keys(replace(t, {"a.c": [5]}), big) == ("a.c[0]", "e")
    calls = []
    assert cached(t.a, lambda n: calls.append(1) or len(n)) == 2
    f = lambda n: calls.append(1) or len(n)  # noqa: E731
    assert cached(t.a, f) == cached(t.a, f) == 2 and len(calls) == 2  # once per (node, fn)


DESIGNS = [
    [],
    ["model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=64"],
    ["workload.batch_size=8", "hardware.memory.hbm.bandwidth_gb_s=2000"],  # int on a float field
    ["hardware=dgx_h100", "hardware.n_chips=4"],  # tensor_parallel interpolates n_chips: Hydra's path
    ["workload=closed_loop", "workload.concurrency=16", "engine=vllm"],  # engine fields interpolate
    ["hardware=sn40l_rack16", "optimizations=all", "kv_policy=snapstream", "kv_policy.budget=2048"],
    ["model=deepseek_r1", "hardware=sn40l_rack16", "workload.weight_dtype=fp8", "workload.batch_fill=true"],
    ["+tracking.note=x"],  # an appended key: Hydra applies it
]


@pytest.mark.parametrize("overrides", DESIGNS, ids=lambda o: " ".join(o) or "default")
def test_api_design_is_hydra_s_config_and_numbers(overrides):
    hydra = compose(list(overrides))
    mine = design_config(overrides)
    got = mine.to_dict() if isinstance(mine, Tree) else OmegaConf.to_container(mine, resolve=True)
    assert got == OmegaConf.to_container(hydra, resolve=True)
    a, b = evaluate(hydra, keep_steps=False), decodelab.evaluate(*overrides)
    assert (a.status, a.reason, a.metrics) == (b.status, b.reason, b.metrics)


def test_api_fast_path_sets_typed_values_and_the_rest_falls_back():
    t = design_config(["workload.batch_size=8", "hardware.memory.hbm.bandwidth_gb_s=2000"])
    assert isinstance(t, Tree)
    assert type(t.workload.batch_size) is int and type(t.hardware.memory.hbm.bandwidth_gb_s) is float
    assert not isinstance(design_config(["hardware=dgx_h100", "hardware.n_chips=4"]), Tree)
    assert design_config(["hardware=dgx_h100", "hardware.n_chips=4"]).hardware.tensor_parallel == 4


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["workload.batch_size=abc"], "workload.batch_size"),
        (["model=no_such_model"], "model"),
        (["workload.batchsize=4"], "batchsize"),
    ],
)
def test_api_bad_override_raises_one_config_error(overrides, words):
    with pytest.raises(decodelab.ConfigError) as e:
        decodelab.evaluate(*overrides)
    assert words in str(e.value) and "\n" not in str(e.value).strip()


def test_modes_never_change_the_resolved_design():
    """Batch fill, the static graph, the draft and the serving pools make designs of their own
    (tree.replace); the design handed in is the same value afterwards."""
    for ov in (
        ["workload.batch_fill=true"],
        ["model=mixtral_8x7b", "hardware=dgx_h100", "speculative=draft"],
        ["workload=open_loop", "workload.arrival_rate=4", "disagg=nvlink_1p1d", "workload.n_requests=64"],
    ):
        t = freeze(OmegaConf.to_container(compose_cfg(*ov), resolve=True))
        before = pickle.dumps(t)
        assert evaluate(t, keep_steps=False).status in ("ok", "infeasible")
        assert pickle.dumps(t) == before


@pytest.mark.benchmark
def test_design_speed_targets():
    """decodelab.evaluate(...) with overrides <= 10 ms warm; a resolved static design of 128
    decode steps <= 1 ms (medians, in process)."""
    from decodelab.apps import design_bench

    r = design_bench.measure()
    assert r["evaluate_ms"] <= design_bench.TARGET_EVALUATE_MS, r
    assert r["resolved_ms"] <= design_bench.TARGET_RESOLVED_MS, r
