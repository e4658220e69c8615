"""Compose configs with Hydra: the one helper every run mode, subcommand, the Python API and the
tests use (instead of each opening its own Hydra context). Hydra is imported on first use (it
costs start-up time a plain `import decodelab` should not pay)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence

from decodelab import paths
from decodelab.config import schema  # noqa: F401  (registers the typed schemas)
from decodelab.config import searchpath
from decodelab.config.diagnose import describe, search_dirs, unparsable
from decodelab.errors import ConfigError

CONF_DIR = str(paths.CONF_DIR)


@contextmanager
def context(config_dir: Optional[str] = None) -> Iterator[None]:
    """Hydra initialised on decodelab's conf/ for the block, with `config_dir` (a user's folder, as
    `--config-dir`) in front of it (config.searchpath: a user's file of a shipped file's name is
    the one read); nothing global stays initialised after it. A Hydra already initialised (a worker
    process keeps a sweep's context between chunks, config/composition.py) is set aside for the
    block and restored."""
    from hydra import initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra

    searchpath.register()
    outer = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="decodelab"):
            if config_dir:
                GlobalHydra.instance().clear()
                path = searchpath.search_path(config_dir)
                Hydra.create_main_hydra2(task_name="decodelab", config_search_path=path)
            yield
    finally:
        if outer is not None:  # Hydra's own exit restores the (cleared) state it found
            GlobalHydra.instance().clear()
            GlobalHydra.instance().initialize(outer)


def compose_in_context(overrides: Sequence[str] = (), config_name: str = "config"):
    """Compose inside an open `context()` (cheap to repeat: one context, many configs)."""
    from hydra import compose as hydra_compose

    return hydra_compose(config_name=config_name, overrides=list(overrides))


def compose(overrides: Sequence[str] = (), config_name: str = "config", config_dir: Optional[str] = None):
    """The composed config of `overrides` (Hydra syntax: `model=llama3_1_70b`,
    `workload.batch_size=8`, `hydra.searchpath=[file://my_conf]` works as on the command line)."""
    with context(config_dir):
        return compose_in_context(overrides, config_name)


def compose_all(
    jobs: Sequence[Sequence[str]], config_name: str = "config", config_dir: Optional[str] = None
) -> List[object]:
    """One composed config per job, in one Hydra context."""
    with context(config_dir):
        return [compose_in_context(job, config_name) for job in jobs]


def hydra_errors() -> tuple:
    """The exception types of a config that does not compose (for callers that report them)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (HydraException, OmegaConfBaseException)


def compose_or_error(
    overrides: Sequence[str] = (), config_name: str = "config", config_dir: Optional[str] = None
):
    """compose(), a config that does not compose raised as ConfigError with one line naming the
    field (or file) and what is allowed (decodelab.config.diagnose)."""
    import yaml

    failing = hydra_errors() + (yaml.YAMLError,)
    try:
        return compose(overrides, config_name, config_dir)
    except failing as e:
        bad = unparsable(overrides)
        try:
            ref = compose((), config_name, config_dir)
        except failing:
            ref = None
        dirs = search_dirs(config_dir, overrides)
        raise ConfigError(describe(e, ref, override=bad, search_dirs=dirs, syntax=bad is not None)) from None
