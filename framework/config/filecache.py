"""Parsed config files kept for the life of the process. Hydra reads and parses every YAML file a
config names again on each composition (its CachingConfigRepository lives for one composition
only), and OmegaConf's pure-Python YAML parse is about a third of a composition's ~0.5 s: a single
`decodelab` run composes its config two or three times (check, plan, Hydra's run), an in-process
caller (the Python API, the tests) many times.

`FileConfigSource` here is Hydra's file:// config source, except that it keeps each file's parse,
keyed by the file's real path, modification time (ns) and size, and hands out a deep copy (Hydra
merges into the config it is given). A file edited between two compositions has a new key and is
read again. Hydra 1.3 has no public way to swap the source of a scheme: `register` sets the
registry's entry (the pin hydra-core < 1.4 in pyproject.toml holds this to the version read). The
class keeps Hydra's class name: Hydra's registry refuses a second class of another name for a
scheme, and a launcher's worker (hydra-joblib-launcher) restores the registry before Hydra
registers its own sources again, which it then skips."""

from __future__ import annotations

import copy
import os
from typing import Dict, Tuple

from hydra._internal.core_plugins import file_config_source
from hydra.plugins.config_source import ConfigResult

_PARSED: Dict[Tuple[str, int, int], ConfigResult] = {}


class FileConfigSource(file_config_source.FileConfigSource):
    """Hydra's FileConfigSource with a per-process cache of parsed files (module docstring)."""

    def load_config(self, config_path: str) -> ConfigResult:
        full = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            st = os.stat(full)
        except OSError:  # Hydra's own message for a missing file
            return super().load_config(config_path)
        key = (full, st.st_mtime_ns, st.st_size)
        kept = _PARSED.get(key)
        if kept is None:
            kept = _PARSED[key] = super().load_config(config_path)
        return ConfigResult(  # where it was found: this source's, if another found it first
            config=copy.deepcopy(kept.config),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header=dict(kept.header),
        )


def register() -> None:
    """Hydra reads file:// configs through this module's FileConfigSource from now on (idempotent)."""
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.plugins import Plugins

    Plugins.instance()  # Hydra registers its own sources first; a later register would refuse ours
    SourcesRegistry.instance().types[FileConfigSource.scheme()] = FileConfigSource


def forget() -> None:
    _PARSED.clear()
