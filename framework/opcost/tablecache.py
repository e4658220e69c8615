"""Operator tables read once per process and per content of the file: the readers of core's
measured tables (GEMM, all-reduce, MoE, decode attention) and what is derived from them are
cached by the table's path, and every such cache is dropped as soon as the file behind a path
changes (its modification time or size), so a table edited during a session (a notebook, a
long sweep) is read again; resume keys on the same content (core.result.config_hash).

Across processes, each reader's results are also kept on disk (the cold start of `decodelab`
and every sweep worker would otherwise import pandas and SciPy and parse the tables again):
one pickle per reader and table content under `<cache>/decodelab/tables/<code>/`, where
`<code>` hashes this package's source as this process imported it (a source edited since turns
the disk cache off) and the installed pandas, SciPy and NumPy, and the file
name the reader and a hash of the table's bytes (an edited or copied table is looked up by what
it holds). The pickles are this user's own cache, as Numba's `cache=True` files beside them;
an unreadable one is computed again, an unwritable cache directory keeps results in memory
only. Arrays a reader returns are read-only (they are shared by every design that asks)."""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import lru_cache, wraps
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from decodelab import paths
from decodelab.paths import PACKAGE_DIR, cache_root, resolve_user_path

_CACHES: List[Callable] = []  # every table_cache'd function's lru_cache
_STAMPS: Dict[str, Tuple[str, int, int]] = {}  # path as given -> (file, mtime ns, size) when last read
_STORES: Dict[Path, dict] = {}  # pickle file -> its entries (args -> result), read once
_DISK = [True]  # False: results stay in memory (DECODELAB_TABLE_CACHE=0, or no writable cache)


def table_cache(maxsize: int):
    """lru_cache(maxsize) of a function whose first argument is a table's path, dropped with
    all the others when that table's file changes; results also kept on disk per content."""

    def deco(fn):
        name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"
        cached = lru_cache(maxsize=maxsize)(lambda path, *args: _on_disk(name, fn, path, args))
        _CACHES.append(cached)

        @wraps(fn)
        def wrapper(path, *args):
            _check(path)
            return cached(path, *args)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper

    return deco


@lru_cache(maxsize=256)
def _where(path: str, cwd: str, data_dir: Path) -> str:
    return str(resolve_user_path(path))


def _check(path: str) -> None:
    """Drop every cache if the file `path` names is not the one last read: another file (a
    relative name under another working or data directory) or the same file changed."""
    where = _where(path, os.getcwd(), paths.DATA_DIR)
    try:
        st = os.stat(where)
        stamp = (where, st.st_mtime_ns, st.st_size)
    except (OSError, ValueError):
        stamp = (where, -1, -1)  # no such file: the reader says so (and a file appearing is a change)
    if _STAMPS.get(path, stamp) != stamp:
        clear()
    _STAMPS[path] = stamp


def clear() -> None:
    """Drop every cached table (and the paths' resolutions) from memory."""
    for c in _CACHES:
        c.cache_clear()
    _STAMPS.clear()
    _STORES.clear()
    _where.cache_clear()
    _digest.cache_clear()


def _on_disk(name: str, fn: Callable, path: str, args: tuple):
    """fn(path, *args) from the disk cache of the table's content, else computed (and stored)."""
    file = _store_file(name, path) if _DISK[0] else None
    if file is None:
        return _frozen(fn(path, *args))
    store = _STORES.get(file)
    if store is None:
        store = _STORES[file] = _load(file)
    if args in store:
        return store[args]
    value = store[args] = _frozen(fn(path, *args))  # a reader's TableError is not stored
    _save(file, args, value)
    return value


def _store_file(name: str, path: str) -> Optional[Path]:
    where = str(resolve_user_path(path))  # as the reader finds it (not _where's memo)
    try:
        st = os.stat(where)
    except (OSError, ValueError):
        return None  # no such file: the reader says so
    root = _root()
    return None if root is None else root / f"{name}-{_digest(where, st.st_mtime_ns, st.st_size)}.pkl"


@lru_cache(maxsize=256)
def _digest(where: str, mtime_ns: int, size: int) -> str:
    """A hash of the table's bytes (per modification time and size: read once)."""
    return hashlib.blake2b(Path(where).read_bytes(), digest_size=16).hexdigest()


def _code_files() -> Dict[Path, Tuple[int, int, bytes]]:
    """The code the cached results depend on: (mtime ns, size, bytes) of each source file."""
    out = {}
    for f in sorted((PACKAGE_DIR / "opcost").glob("*.py")) + [PACKAGE_DIR / "kernel_layout.py"]:
        st = f.stat()
        out[f] = (st.st_mtime_ns, st.st_size, f.read_bytes())
    return out


# Read when this process imports the table readers, so the key names the code it runs: a source
# edited after that (another run editing opcost) turns the disk cache off for this process,
# rather than storing old code's results under the new code's key.
_CODE_AT_IMPORT = _code_files()


def _code_unchanged() -> bool:
    for f, (mtime_ns, size, _) in _CODE_AT_IMPORT.items():
        try:
            st = f.stat()
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) != (mtime_ns, size):
            return False
    return True


@lru_cache(maxsize=1)
def _root() -> Optional[Path]:
    """<cache>/decodelab/tables/<hash of this package's code and the libraries that read tables>."""
    if os.environ.get("DECODELAB_TABLE_CACHE", "1") == "0" or not _code_unchanged():
        return None
    code = hashlib.blake2b(digest_size=8)
    for _, _, text in _CODE_AT_IMPORT.values():
        code.update(text)
    for lib in ("numpy", "pandas", "scipy", "pyarrow"):
        spec = find_spec(lib)
        origin = spec.origin if spec is not None and spec.origin else ""
        code.update(f"{lib}:{origin}:{os.stat(origin).st_mtime_ns if origin else 0};".encode())
    root = cache_root() / "tables" / code.hexdigest()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return root


def _load(file: Path) -> dict:
    try:
        with open(file, "rb") as f:
            store = pickle.load(f)
    except Exception:  # noqa: BLE001  (missing, truncated or foreign: computed again)
        return {}
    return store if isinstance(store, dict) else {}


def _save(file: Path, args: tuple, value) -> None:
    """Add one entry to the pickle (merged with what other processes wrote meanwhile)."""
    store = {**_load(file), args: value}
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(store, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, file)
    except OSError:
        _DISK[0] = False  # a full or read-only cache: memory only from now on
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _frozen(value):
    """`value` with every NumPy array in it made read-only (they are shared between designs)."""
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    elif isinstance(value, dict):
        for v in value.values():
            _frozen(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _frozen(v)
    return value
