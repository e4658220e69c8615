"""The parsed-file cache (decodelab.config.filecache): Hydra reads each config file once a process,
and a file changed since is read again."""

from __future__ import annotations

import os

from conftest import write_model

from decodelab.config import compose as C
from decodelab.config import filecache


def test_file_sources_are_cached_and_a_changed_file_is_read_again(tmp_path):
    from hydra._internal.sources_registry import SourcesRegistry

    path = write_model(tmp_path, "cached_m", n_layers=7)
    over = [f"hydra.searchpath=[file://{tmp_path}]", "model=cached_m"]
    filecache.forget()
    cfg = C.compose(over)
    assert SourcesRegistry.instance().resolve("file") is filecache.FileConfigSource
    assert cfg.model.n_layers == 7
    assert any(k[0] == os.path.realpath(path) for k in filecache._PARSED)
    cfg.model.n_layers = 99  # a caller's change stays in its own copy
    assert C.compose(over).model.n_layers == 7
    text = path.read_text().replace("n_layers: 7", "n_layers: 11")
    path.write_text(text)  # a new size: a new key, even within the clock's resolution
    assert C.compose(over).model.n_layers == 11
