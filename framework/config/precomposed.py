"""A single run of the Hydra app (`decodelab [OVERRIDES]`) composes its config once. Before Hydra
runs, decodelab.config.check composes the command line's config to check it (`check`); Hydra's
own start then composed it twice more (`Hydra.get_mode`, then `Hydra.run`), ~0.15 s each. The
checked config is kept here, and the Hydra app's config loader (`ReusingLoader`, installed by
decodelab.apps.run) hands Hydra a copy of it for the same search path, config name and overrides.

`check` answers only where one composition settles it: the shipped primary config, no `+`/`~`
override, no sweep, a config that composes, resolves and holds only finite numbers, and no user
file problem; anything else (None) goes through decodelab.config.plan's full check, which names
each problem. The kept config is what Hydra would compose: Hydra's `_run_app` adds
`hydra.mode=RUN` to a run whose config leaves the mode unset, and so does `check`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.types import RunMode

from decodelab.config import values as V
from decodelab.config.composition import Composer, Source, hydra_context, is_hydra
from decodelab.config.fields import parse

_KEPT: Dict[tuple, object] = {}  # one entry: the last checked single run's config


def _key(loader, config_name: Optional[str], overrides: Sequence[str]) -> tuple:
    where = tuple((e.provider, e.path) for e in loader.config_search_path.get_path())
    return (where, config_name, tuple(overrides))


def forget() -> None:
    _KEPT.clear()


def _quick(overrides: Sequence[str]) -> bool:
    """One composition can check these overrides (else the full check: config.plan)."""
    for o in map(parse, overrides):
        if o.is_add() or o.is_force_add() or o.is_delete() or o.is_sweep_override():
            return False
        if o.key_or_group == "hydra.mode":
            return False
    return True


def check(source: Source, overrides: List[str], output_problem) -> Optional[List[str]]:
    """The problems of `decodelab OVERRIDES` (a single run of the shipped primary config) from one
    composition, kept for the Hydra app; None where the full check must tell (a problem found,
    or overrides one composition cannot check). `output_problem(path)`: config.plan's check of
    the run directory."""
    from omegaconf import OmegaConf, open_dict

    forget()
    if source.config_dir or source.config_name != "config" or not _quick(overrides):
        return None
    with hydra_context(source) as loader:
        try:
            cfg = loader.load_configuration(source.config_name, list(overrides), RunMode.RUN)
        except Exception:  # noqa: BLE001  (Hydra's ValueError of `model=null` too: the full check names it)
            return None
        comp = Composer(source, loader)
        if V.user_file_problems(comp, [[o for o in overrides if not is_hydra(o)]]):
            return None
        plain = copy.deepcopy(cfg)
        with open_dict(plain):
            del plain["hydra"]
        if V.resolved_problems(comp, (), plain):
            return None
        problem = output_problem(Path(str(OmegaConf.select(cfg, "hydra.run.dir"))))
        if problem:
            return [problem]
        if cfg.hydra.mode is None:  # what Hydra's _run_app composes for a run (RunMode.RUN)
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
        _KEPT[_key(loader, source.config_name, overrides)] = cfg
    return []


class ReusingLoader(ConfigLoaderImpl):
    """Hydra's config loader, which gives the config `check` kept when asked for the same search
    path, config name and overrides: to Hydra.get_mode, then to Hydra.run, which owns it."""

    def load_configuration(
        self,
        config_name: Optional[str],
        overrides: List[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ):
        key = _key(self, config_name, overrides)
        cfg = _KEPT.get(key)
        if cfg is None:
            return super().load_configuration(
                config_name, overrides, run_mode, from_shell, validate_sweep_overrides
            )
        if run_mode == RunMode.RUN:  # the last use (get_mode before it only reads hydra.mode)
            _KEPT.pop(key)
        return cfg
