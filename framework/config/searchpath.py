"""The config search path: a user's folders before decodelab's conf/ (issue 40). Hydra 1.3 searches
its primary config dir ("main": conf/) before `--config-dir` ("command-line") and
`hydra.searchpath` entries, so a user's `model/llama3_2_1b.yaml` would be silently ignored in
favour of the shipped one. Here the user's folders come first, in every way decodelab starts
Hydra (the Hydra app, compose(), sweeps, the Python API), and the run names each user file that
replaces a shipped one (shadowing_notes).

The primary config stays decodelab's conf/config.yaml unless `--config-dir` holds one of that
name: Hydra reads the primary config before it adds the `hydra.searchpath` entries."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
from hydra.core.config_search_path import ConfigSearchPath, SearchPathElement, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin

from decodelab import paths

CONF_DIR = str(paths.CONF_DIR)

MAIN = "main"  # Hydra's provider name of the primary config dir (decodelab's conf/)


def is_user(provider: Optional[str]) -> bool:
    """A user's folder: `--config-dir` or a `hydra.searchpath` entry (from the command line, the
    primary config, or decodelab's own code)."""
    return provider == "command-line" or str(provider).startswith("hydra.searchpath")


class UserFirstSearchPath(ConfigSearchPathImpl):
    """Hydra's search path, except that a user's folder goes in front of conf/ (after the user
    folders added before it: `--config-dir`, then the `hydra.searchpath` entries in order)."""

    def _before_main(self, provider: str, path: str) -> bool:
        at = self.find_first_match(SearchPathQuery(provider=MAIN))
        if not is_user(provider) or at < 0:
            return False
        self.config_search_path.insert(at, SearchPathElement(provider, path))
        return True

    def append(self, provider: str, path: str, anchor=None) -> None:
        if not self._before_main(provider, path):
            super().append(provider, path, anchor)

    def prepend(self, provider: str, path: str, anchor=None) -> None:
        if not self._before_main(provider, path):
            super().prepend(provider, path, anchor)


def _is_conf(path: str) -> bool:
    return os.path.realpath(path.removeprefix("file://")) == os.path.realpath(CONF_DIR)


class UserConfigFirst(SearchPathPlugin):
    """Makes a search path whose primary dir is decodelab's conf/ a UserFirstSearchPath (Hydra
    calls this plugin when it builds a search path, before it adds the user's folders)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        entries = search_path.get_path()
        if isinstance(search_path, ConfigSearchPathImpl) and any(
            e.provider == MAIN and _is_conf(e.path) for e in entries
        ):
            users = [e for e in entries if is_user(e.provider)]
            search_path.config_search_path = [e for e in entries if not is_user(e.provider)]
            search_path.__class__ = UserFirstSearchPath  # the same list, user entries placed first
            for e in users:
                search_path.append(e.provider, e.path)


def register() -> None:
    """Hydra uses UserConfigFirst from now on in this process (idempotent). Every entry point
    that starts Hydra on conf/ calls it: config.compose, config.composition, apps.run. It also
    installs the parsed-file cache (config.filecache)."""
    from hydra.core.plugins import Plugins

    from decodelab.config import filecache

    Plugins.instance().register(UserConfigFirst)
    filecache.register()


def search_path(config_dir: Optional[str], extra: Sequence[str] = ()) -> ConfigSearchPath:
    """The search path of `decodelab --config-dir config_dir 'hydra.searchpath=[extra]'`:
    config_dir, conf/ (Hydra's own configs first, the structured schemas last). The `extra`
    folders are listed after conf/ for the group options a loader lists without overrides; a
    composition given the `hydra.searchpath` override puts them before conf/, and reads the
    primary config from config_dir or conf/ only, as the Hydra app does."""
    from hydra._internal.utils import create_config_search_path

    register()
    path = create_config_search_path(CONF_DIR)
    if config_dir:
        path.prepend(provider="command-line", path=f"file://{config_dir}")
    for d in extra:
        path.append(provider="decodelab options", path=f"file://{d}", anchor=SearchPathQuery(provider=MAIN))
    return path


def used_configs(loader, config_name: str, overrides: Sequence[str]) -> List[Tuple[str, bool]]:
    """(config path, is the primary config) of every config file a composition reads
    (`model/llama3_2_1b`, ...): Hydra's defaults list, inherited options included."""
    from hydra.types import RunMode

    defaults = loader.compute_defaults_list(config_name, list(overrides), RunMode.RUN).defaults
    return [(d.config_path, d.primary) for d in defaults if d.config_path]


_SHIPPED: List[str] = []


def _shipped() -> List[str]:
    """The shipped config files, relative to conf/ (`model/llama3_2_1b.yaml`, ...)."""
    if not _SHIPPED:
        conf = Path(CONF_DIR)
        _SHIPPED.extend(str(p.relative_to(conf)) for p in sorted(conf.rglob("*.yaml")))
    return _SHIPPED


def could_shadow(dirs: Iterable[str]) -> bool:
    """Whether any of the user's folders holds a file of a shipped file's name (a few stat calls:
    the defaults list is computed only then)."""
    return any((Path(d) / rel).is_file() for d in dirs if not _is_conf(str(d)) for rel in _shipped())


def _first(folders: Sequence[Path], name: str) -> Optional[Path]:
    return next((d / name for d in folders if (d / name).is_file()), None)


def shadowing_notes(
    dirs: Iterable[str], used: Iterable[Tuple[str, bool]], config_dir: Optional[str] = None
) -> List[str]:
    """One note per config file of a user's folder that is read in place of a shipped one of the
    same name. `dirs`: the folders in search order (conf/ among them); `used`: used_configs();
    the primary config comes from `config_dir` (`--config-dir`) or conf/ only."""
    conf = Path(CONF_DIR).resolve()
    folders = [Path(d).resolve() for d in dirs]
    primary_folders = [Path(d).resolve() for d in (config_dir, CONF_DIR) if d]
    notes = []
    for c, primary in dict.fromkeys(used):
        shipped = conf / f"{c}.yaml"
        found = _first(primary_folders if primary else folders, f"{c}.yaml")
        if found is not None and found != shipped and shipped.is_file():
            notes.append(f"{found} is used in place of the shipped {shipped}")
    return notes


def run_notes(hydra_cfg) -> List[str]:
    """shadowing_notes of the Hydra app's run (`HydraConfig.get()`): its search path as Hydra
    built it, the defaults list of its config name and overrides. Empty without user folders."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    rt = hydra_cfg.runtime
    dirs = [os.path.join(rt.cwd, s.path) for s in rt.config_sources if s.schema == "file"]
    if not could_shadow(dirs) or not GlobalHydra.instance().is_initialized():
        return []
    overrides = [*hydra_cfg.overrides.hydra, *hydra_cfg.overrides.task]
    try:
        used = used_configs(GlobalHydra.instance().config_loader(), hydra_cfg.job.config_name, overrides)
    except (HydraException, OmegaConfBaseException):  # the run composed: a note is not worth failing it
        return []
    config_dir = next(
        (os.path.join(rt.cwd, s.path) for s in rt.config_sources if s.provider == "command-line"), None
    )
    return shadowing_notes(dirs, used, config_dir)
