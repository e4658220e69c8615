"""Shared test helpers: composing Hydra configs (cached) and the lists of config-group options."""
from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

import framework.schema  # noqa: F401  (registers the typed schemas)
from framework.app import CONF_DIR

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


def compose_cfg(*overrides: str):
    """The composed config for `overrides` (tracking off); a private deep copy the caller may
    mutate. Compositions are cached, so repeating a combination costs a deepcopy (~2 ms)."""
    return copy.deepcopy(_compose_cached(("tracking=off",) + tuple(overrides)))


def compose_raw(*overrides: str):
    """Compose without the cache (for tests that expect composition itself to fail)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="session")
def compose():
    """`compose(*overrides)` -> a mutable composed config (cached composition)."""
    return compose_cfg


def claim_figure_params(ids, gaps: dict) -> list:
    """One pytest param per figure of the claim sweeps whose id is in `ids`; the figures named
    in `gaps` ({(id, figure): reason}) are strict xfails with that reason."""
    from framework.claims import SWEEPS_DIR, load_sweep
    out = []
    for path in sorted(SWEEPS_DIR.glob("c*.yaml")):
        claim, _ = load_sweep(path)
        if claim["id"] in ids:
            for fig in claim["figures"]:
                key = (claim["id"], fig["name"])
                marks = [pytest.mark.xfail(reason=gaps[key], strict=True)] if key in gaps else []
                out.append(pytest.param(key, marks=marks, id=f"{key[0]}-{key[1]}"))
    return out
