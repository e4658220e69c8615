"""Composing the configs of a sweep's jobs cheaply (config.plan and the runs use it): Hydra
initialised once per Source (its config dir and name), one composition per choice of config
groups, and each job's field overrides applied to a copy with Hydra's own override semantics.
`prepare` gives a job's config or the one-line reason it does not compose."""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from decodelab.config import schema  # noqa: F401  (registers the typed schemas)
from decodelab.config.compose import CONF_DIR
from decodelab.config.diagnose import search_dirs
from decodelab.core.labels import run_label


@dataclass(frozen=True)
class Source:
    """Where configs come from: `--config-dir` / `--config-name` of the -m equivalent."""

    config_dir: Optional[str]
    config_name: str
    common: Tuple[str, ...] = ()  # hydra.* overrides, the same for every job


@contextmanager
def hydra_context(source: Source) -> Iterator[object]:
    """Hydra initialised on conf/ with the sweep's directory in front of it, as
    `decodelab --config-dir DIR` does (the same search path). Yields Hydra's config loader."""
    from hydra import initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="decodelab"):
        extra = search_dirs(None, source.common)[:-1]  # hydra.searchpath entries
        if source.config_dir or extra:
            search_path = create_config_search_path(CONF_DIR)
            if source.config_dir:
                search_path.prepend(
                    provider="command-line",
                    path=f"file://{source.config_dir}",
                    anchor=SearchPathQuery(provider="schema"),
                )
            for d in extra:
                search_path.prepend(
                    provider="hydra.searchpath", path=f"file://{d}", anchor=SearchPathQuery(provider="schema")
                )
            GlobalHydra.instance().clear()
            Hydra.create_main_hydra2(task_name="decodelab", config_search_path=search_path)
        yield GlobalHydra.instance().config_loader()


_PARSED: Dict[str, object] = {}


def parse(override: str):
    """One override string, parsed by Hydra (cached: a sweep repeats the same few strings)."""
    o = _PARSED.get(override)
    if o is None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        o = _PARSED[override] = OverridesParser.create().parse_override(override)
    return o


def is_hydra(override: str) -> bool:
    key = parse(override).key_or_group
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


class Composer:
    """Composed configs of one Source, cached per choice of config groups."""

    def __init__(self, source: Source, loader) -> None:
        self.source, self.loader = source, loader
        self._groups: Dict[str, bool] = {}
        self._base: Dict[Tuple[str, ...], object] = {}
        self._work: Dict[Tuple[str, ...], tuple] = {}

    def is_group(self, override: str) -> bool:
        o = parse(override)
        key = o.key_or_group
        if key not in self._groups:
            self._groups[key] = bool(self.options(key))
        return self._groups[key] or o.package is not None

    def options(self, group: str) -> List[str]:
        """The options of a config group, with the primary config's `hydra.searchpath` (a sweep
        file that adds a user's config dir) as Hydra's own loader sees them for a multirun."""
        return self.loader.get_group_options(
            group, config_name=self.source.config_name, overrides=list(self.source.common)
        )

    def split(self, job: Sequence[str]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
        """(config-group overrides, field overrides) of one job."""
        groups = tuple(o for o in job if self.is_group(o))
        return groups, tuple(o for o in job if not self.is_group(o))

    def base(self, groups: Tuple[str, ...]):
        cfg = self._base.get(groups)
        if cfg is None:
            from hydra import compose

            cfg = self._base[groups] = compose(
                config_name=self.source.config_name, overrides=list(self.source.common) + list(groups)
            )
        return cfg

    def config(self, job: Sequence[str], reuse: bool = False):
        """The composed config of one job: what `decodelab -m` would give its task function.

        reuse=True: a working copy per choice of groups is kept and only the top-level nodes
        the previous job's field overrides touched are put back from the pristine config
        (a node copy, interpolations kept) -- ~1 ms instead of a ~8 ms deep copy. The config is
        then valid until the next call; evaluate() never mutates its config (it copies)."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from omegaconf import open_dict

        groups, fields = self.split(job)
        base = self.base(groups)
        if not reuse:
            cfg = copy.deepcopy(base)
        else:
            cfg, dirty = self._work.get(groups, (None, set()))
            if cfg is None:
                cfg = copy.deepcopy(base)
            with open_dict(cfg):
                for top in dirty:
                    if top in base:
                        cfg[top] = base[top]
                    elif top in cfg:
                        del cfg[top]
            self._work[groups] = (cfg, set())
        parsed = [parse(o) for o in fields]
        if reuse:
            self._work[groups][1].update(o.key_or_group.split(".")[0] for o in parsed)
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        return cfg


def one_line(e: BaseException) -> str:
    """Hydra/OmegaConf errors as one line (with the cause, which names the key and the value)."""
    parts = [str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__]
    cause = e.__cause__
    if cause is not None and str(cause).strip():
        parts.append(str(cause).strip().splitlines()[0])
    return ": ".join(parts)


_COMPOSERS: Dict[Source, Tuple[object, Composer]] = {}


def context_composer(config_name: str = "config") -> Composer:
    """A Composer on the Hydra context open now (config.compose.context()): one base
    composition per choice of config groups, field overrides applied to a copy."""
    from hydra.core.global_hydra import GlobalHydra

    return Composer(Source(None, config_name), GlobalHydra.instance().config_loader())


def composer(source: Source) -> Composer:
    """One Hydra context and composition cache per worker process, kept between chunks."""
    if source not in _COMPOSERS:
        reset()
        ctx = hydra_context(source)
        loader = ctx.__enter__()
        _COMPOSERS[source] = (ctx, Composer(source, loader))
    return _COMPOSERS[source][1]


def reset() -> None:
    """Leave the cached Hydra context (a process that evaluated in-process composes again)."""
    for ctx, _ in _COMPOSERS.values():
        ctx.__exit__(None, None, None)
    _COMPOSERS.clear()


def prepare(composer: Composer, job: Sequence[str]):
    """(config or None, resolved dict, run name, error) of one job; never raises."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = composer.config(job, reuse=True)
        return cfg, OmegaConf.to_container(cfg, resolve=True), run_label(cfg), None
    except (HydraException, OmegaConfBaseException) as e:
        # overrides that do not apply: the overrides identify the design
        return None, {"overrides": list(job)}, " ".join(job), one_line(e)
