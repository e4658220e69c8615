"""Operator tables read once per process and per content of the file: the readers of core's
measured tables (GEMM, all-reduce, MoE, decode attention) and what is derived from them are
cached by the table's path, and every such cache is dropped as soon as the file behind a path
changes (its modification time or size), so a table edited during a session (a notebook, a
long sweep) is read again; resume keys on the same content (core.result.config_hash)."""

from __future__ import annotations

import os
from functools import lru_cache, wraps
from typing import Callable, Dict, List, Tuple

from decodelab.paths import resolve_user_path

_CACHES: List[Callable] = []  # every table_cache'd function's lru_cache
_STAMPS: Dict[str, Tuple[int, int]] = {}  # path as given -> (mtime ns, size) when last read


def table_cache(maxsize: int):
    """lru_cache(maxsize) of a function whose first argument is a table's path, dropped with
    all the others when that table's file changes."""

    def deco(fn):
        cached = lru_cache(maxsize=maxsize)(fn)
        _CACHES.append(cached)

        @wraps(fn)
        def wrapper(path, *args):
            _check(path)
            return cached(path, *args)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper

    return deco


@lru_cache(maxsize=256)
def _where(path: str, cwd: str) -> str:
    return str(resolve_user_path(path))


def _check(path: str) -> None:
    try:
        st = os.stat(_where(path, os.getcwd()))
        stamp = (st.st_mtime_ns, st.st_size)
    except (OSError, ValueError):
        stamp = (-1, -1)  # no such file: the reader says so (and a file appearing is a change)
    if _STAMPS.get(path, stamp) != stamp:
        clear()
    _STAMPS[path] = stamp


def clear() -> None:
    """Drop every cached table (and the paths' resolutions)."""
    for c in _CACHES:
        c.cache_clear()
    _STAMPS.clear()
    _where.cache_clear()
