"""Composing the configs of a sweep's jobs cheaply (config.plan and the runs use it): Hydra
initialised once per Source (its config dir and name), one composition per choice of config
groups, and each job's field overrides applied to a copy with Hydra's own override semantics.
`prepare` gives a job's config or the one-line reason it does not compose."""

from __future__ import annotations

import copy
import os
import pickle
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from decodelab.config import schema  # noqa: F401  (registers the typed schemas)
from decodelab.config import searchpath
from decodelab.config.compose import CONF_DIR
from decodelab.config.diagnose import search_dirs
from decodelab.config.fields import interpolated, node_kind, parse, settable, typed_as
from decodelab.config.safety import CodeInConfig
from decodelab.core.labels import run_label
from decodelab.core.tree import Tree, freeze, replace


@dataclass(frozen=True)
class Source:
    """Where configs come from: `--config-dir` / `--config-name` of the -m equivalent."""

    config_dir: Optional[str]
    config_name: str
    common: Tuple[str, ...] = ()  # hydra.* overrides, the same for every job


@contextmanager
def hydra_context(source: Source) -> Iterator[object]:
    """Hydra initialised on conf/ with the sweep's directory and the `hydra.searchpath` entries in
    front of it, as `decodelab --config-dir DIR` does (the same search path, config.searchpath: a
    user's file of a shipped file's name is the one read). Yields Hydra's config loader."""
    from hydra import initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra

    searchpath.register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="decodelab"):
        extra = search_dirs(None, source.common)[:-1]  # hydra.searchpath entries
        if source.config_dir or extra:
            GlobalHydra.instance().clear()
            path = searchpath.search_path(source.config_dir, extra)
            Hydra.create_main_hydra2(task_name="decodelab", config_search_path=path)
        yield GlobalHydra.instance().config_loader()


def is_hydra(override: str) -> bool:
    key = parse(override).key_or_group
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


class PlainBase:
    """A choice of config groups composed and resolved once (a Tree), with the node kind of each
    field a plain value may be set on (config.fields): a field override becomes a dict update."""

    def __init__(self, cfg) -> None:
        from omegaconf import OmegaConf

        self.cfg = cfg
        self.tree = freeze(OmegaConf.to_container(cfg, resolve=True))
        self.raw = OmegaConf.to_container(cfg, resolve=False)
        self.kinds: Dict[str, str] = {}

    def kind(self, key: str) -> str:
        """The node kind a plain value may be set on ("" where Hydra must apply the override)."""
        k = self.kinds.get(key)
        if k is None:
            plain = settable(self.tree, key) and not interpolated(self.raw, key)
            k = self.kinds[key] = node_kind(self.cfg, key) if plain else ""
        return k

    def with_overrides(self, parsed) -> Optional[Tree]:
        values = {}
        for o in parsed:
            if (
                o.is_sweep_override()
                or o.is_add()
                or o.is_delete()
                or o.is_force_add()
                or o.package is not None
            ):
                return None
            kind = self.kind(o.key_or_group)
            v = typed_as(kind, o.value()) if kind else None
            if v is None:
                return None
            values[o.key_or_group] = v
        return replace(self.tree, values)


class Composer:
    """Composed configs of one Source, cached per choice of config groups."""

    def __init__(self, source: Source, loader) -> None:
        self.source, self.loader = source, loader
        self._groups: Dict[str, bool] = {}
        self._base: Dict[Tuple[str, ...], object] = {}
        self._work: Dict[Tuple[str, ...], tuple] = {}
        self._plain: Dict[Tuple[str, ...], PlainBase] = {}
        self._repo = None  # Hydra's config repository of the source, for group options

    def is_group(self, override: str) -> bool:
        o = parse(override)
        key = o.key_or_group
        if key not in self._groups:
            self._groups[key] = bool(self.options(key))
        return self._groups[key] or o.package is not None

    def options(self, group: str) -> List[str]:
        """The options of a config group, with the primary config's `hydra.searchpath` (a sweep
        file that adds a user's config dir) as Hydra's own loader sees them for a multirun."""
        if self._repo is None:  # what loader.get_group_options builds on every call (~15 ms)
            self._repo = self.loader._parse_overrides_and_create_caching_repo(
                self.source.config_name, list(self.source.common)
            )[1]
        return self._repo.get_group_options(group)

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

    def cached_base(self, groups: Tuple[str, ...]):
        """The composed config of `groups` if composed already, else None."""
        return self._base.get(groups)

    def known_groups(self) -> Dict[str, bool]:
        """Which override keys name config groups (as is_group found them)."""
        return dict(self._groups)

    def adopt(self, known: Dict[str, bool], groups: Tuple[str, ...], pickled: Optional[bytes]) -> None:
        """Take what a planning process found: the keys naming groups and the composed config
        of `groups` (pickled; config.derive), so this process composes nothing for them."""
        self._groups.update(known)
        if pickled is not None and groups not in self._base:
            self._base[groups] = pickle.loads(pickled)

    def plain(self, job: Sequence[str]):
        """The resolved config (core.tree.Tree) of one job where its field overrides set scalars
        no other field interpolates with values of the fields' own types, on the base resolved
        once per choice of groups; None where Hydra must apply them (config() then)."""
        groups, fields = self.split(job)
        base = self._plain.get(groups)
        if base is None:
            if len(self._plain) >= 64:
                self._plain.clear()
            base = self._plain[groups] = PlainBase(self.base(groups))
        return base.with_overrides([parse(o) for o in fields])

    def config(self, job: Sequence[str], reuse: bool = False):
        """The composed config of one job: what `decodelab -m` would give its task function.

        reuse=True: a working copy per choice of groups is kept and only the values the previous
        job's field overrides touched are put back from the pristine config (a node copy,
        interpolations kept; the whole top-level node where an override added a key or set a
        mapping or a list), instead of a deep copy of the config. The config is then valid until
        the next call; evaluate() never mutates its config (it copies)."""
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
            tops = set()  # top-level nodes put back whole, once each
            with open_dict(cfg):
                for key in dirty:
                    top = key.split(".")[0]
                    if top not in tops and not _restore_leaf(cfg, base, key):
                        tops.add(top)
                for top in tops:
                    if top in base:
                        cfg[top] = base[top]
                    elif top in cfg:
                        del cfg[top]
            self._work[groups] = (cfg, set())
        parsed = [parse(o) for o in fields]
        if reuse:
            self._work[groups][1].update(o.key_or_group for o in parsed)
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        return cfg


def _restore_leaf(cfg, base, key: str) -> bool:
    """Put `key` of the working copy `cfg` back as the pristine `base` has it -- the base's node,
    interpolation kept -- where its parent is a mapping in both and the base holds a value there;
    False (a key the base lacks, a mapping or a list): the caller puts back the whole top-level
    node instead. Nodes are looked up without resolving anything."""
    from omegaconf import DictConfig, ListConfig

    *path, last = key.split(".")
    cp, bp = cfg, base
    for part in path:
        cp = cp._get_node(part, validate_access=False) if isinstance(cp, DictConfig) else None
        bp = bp._get_node(part, validate_access=False) if isinstance(bp, DictConfig) else None
    if not (isinstance(cp, DictConfig) and isinstance(bp, DictConfig)):
        return False
    node = bp._get_node(last, validate_access=False)
    if node is None or isinstance(node, (DictConfig, ListConfig)):
        return False  # a key the base lacks (a typed node deletes none) or a mapping / list
    cp[last] = node
    return True


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


def compose_job(composer: Composer, job: Sequence[str], reuse: bool = True):
    """A job's config: `composer`'s fast path (Composer.config: one Hydra composition per choice of
    config groups; reuse: its working copy, valid until the next call), Hydra itself (the context
    open now) for a job naming `hydra.*` settings (search paths)."""
    if any(o.lstrip("+~").startswith("hydra") for o in job):
        from hydra import compose

        return compose(config_name=composer.source.config_name, overrides=list(job))
    return composer.config(job, reuse=reuse)


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


class DetachedComposer(Composer):
    """A Composer that keeps Hydra's config loader but no global Hydra context: nothing stays
    initialised between calls (the command line and other compositions in the process start
    afresh), and a base is composed by the loader itself, once per choice of config groups."""

    MAX_BASES = 64  # distinct choices of config groups kept per process (a few 100 kB each)

    def __init__(self, source: Source, loader) -> None:
        super().__init__(source, loader)
        self._notes: Dict[tuple, List[str]] = {}

    def base(self, groups: Tuple[str, ...]):
        cfg = self._base.get(groups)
        if cfg is None:
            from hydra.types import RunMode
            from omegaconf import open_dict

            if len(self._base) >= self.MAX_BASES:
                self._base.clear()
                self._work.clear()
            cfg = self.loader.load_configuration(
                config_name=self.source.config_name,
                overrides=list(self.source.common) + list(groups),
                run_mode=RunMode.RUN,
                from_shell=False,
            )
            with open_dict(cfg):
                del cfg["hydra"]
            self._base[groups] = cfg
        return cfg

    def notes(self, groups: Tuple[str, ...], dirs: Sequence[str]) -> List[str]:
        """searchpath.shadowing_notes of a choice of config groups: each file of the user's
        folders `dirs` (in search order) read in place of a shipped one; once per choice."""
        key = ("notes", *groups)
        if key not in self._notes:
            configs = searchpath.used_configs(
                self.loader, self.source.config_name, [*self.source.common, *groups]
            )
            self._notes[key] = searchpath.shadowing_notes([*dirs, CONF_DIR], configs, self.source.config_dir)
        return self._notes[key]


_DETACHED: Dict[Source, DetachedComposer] = {}


def detached_composer(source: Source) -> DetachedComposer:
    """The process's DetachedComposer of `source`: Hydra initialised once to build its loader
    (any Hydra context open now is set aside for that and restored)."""
    c = _DETACHED.get(source)
    if c is None:
        from hydra.core.global_hydra import GlobalHydra

        outer = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
        GlobalHydra.instance().clear()
        try:
            with hydra_context(source) as loader:
                c = _DETACHED[source] = DetachedComposer(source, loader)
        finally:
            GlobalHydra.instance().clear()
            if outer is not None:
                GlobalHydra.instance().initialize(outer)
    return c


def design_config(overrides: Sequence[str], config_dir: Optional[str] = None):
    """The config of one design (`decodelab.evaluate`): a Tree on the process's base of its
    choice of groups (DetachedComposer.plain), or, where that does not apply or fails, Hydra's
    full composition, whose error is raised as one line (config.compose.compose_or_error)."""
    from decodelab.config.compose import compose_or_error

    composer = None
    try:
        source = checked_source(config_dir, overrides)  # CodeInConfig (a ConfigError) passes
        composer = detached_composer(source)
        tree = composer.plain([o for o in overrides if not is_hydra(o)])
    except CodeInConfig:
        raise
    except Exception:  # noqa: BLE001  (Hydra's full composition below names what is wrong)
        tree = None
    cfg = tree if tree is not None else compose_or_error(list(overrides), config_dir=config_dir)
    if composer is not None:
        _note_shadowing(composer, [o for o in overrides if not is_hydra(o)])
    return cfg


def _note_shadowing(composer: DetachedComposer, job: Sequence[str]) -> None:
    """A UserWarning per user file read in place of a shipped one (the user's folders come
    first on the search path, config.searchpath): the API's run is not silent about it."""
    import warnings

    dirs = _SOURCES[composer.source][1]
    if searchpath.could_shadow(dirs):
        for note in composer.notes(composer.split(job)[0], [str(d) for d in dirs]):
            warnings.warn(f"note: {note}", UserWarning, stacklevel=4)


_SOURCES: Dict[Source, tuple] = {}  # Source -> (fingerprint of its YAML files, user folders)


def checked_source(config_dir: Optional[str], overrides: Sequence[str]) -> Source:
    """The Source of a design's overrides after config.safety's checks: the overrides every
    call, the user's folders when any YAML file of the search path changed (a file edited
    between two calls in one session), which also drops the compositions cached from it."""
    from decodelab.config import safety

    common = tuple(o for o in overrides if is_hydra(o))
    source = Source(config_dir, "config", common)
    safety.check_overrides(overrides)
    known = _SOURCES.get(source)
    dirs = known[1] if known else safety.user_dirs(config_dir, list(common))
    if known is None or known[0] != _fingerprint([CONF_DIR, *dirs]):
        safety.check_sources(config_dir, list(common))
        _DETACHED.pop(source, None)
        dirs = safety.user_dirs(config_dir, list(common))
        _SOURCES[source] = (_fingerprint([CONF_DIR, *dirs]), dirs)
    return source


def _fingerprint(dirs) -> tuple:
    """(folder, file, mtime, size) of every YAML file under `dirs`."""
    out = []
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith((".yaml", ".yml")):
                    st = os.stat(os.path.join(root, f))
                    out.append((root, f, st.st_mtime_ns, st.st_size))
    return tuple(out)


def prepare(composer: Composer, job: Sequence[str]):
    """(config or None, resolved dict, run name, error) of one job; never raises."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        tree = composer.plain(job)
        if tree is not None:
            return tree, tree.to_dict(), run_label(tree), None
    except Exception:  # noqa: BLE001  (Hydra applies the overrides below and names what is wrong)
        pass
    try:
        cfg = composer.config(job, reuse=True)
        return cfg, OmegaConf.to_container(cfg, resolve=True), run_label(cfg), None
    except (HydraException, OmegaConfBaseException) as e:
        # overrides that do not apply: the overrides identify the design
        return None, {"overrides": list(job)}, " ".join(job), one_line(e)
