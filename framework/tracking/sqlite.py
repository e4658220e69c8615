"""The local SQLite tracking store at the SQLite level: the one lock of a store, a time-limited
integrity check, private (0600) files, an atomic rename into place, and the pragmas that make
MLflow's many small commits cheap. No MLflow here: framework/tracking/local_store.py creates and
checks stores through these, framework/tracking/store.py and sync.py use them."""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Optional


class StoreError(RuntimeError):
    """The tracking store cannot be used (a damaged file, a lock held too long): one line
    naming the file and what to do."""


SQLITE_HEADER = b"SQLite format 3\x00"
LOCK_WAIT_S = 120.0  # creating or syncing a store waits this long for another process's lock
CHECK_TIMEOUT_S = 10.0  # PRAGMA quick_check of an existing store (DECODELAB_STORE_CHECK_TIMEOUT)
FILE_MODE = 0o600  # the store, its lock, its journals: the owner's only
DIR_MODE = 0o700


def lock_path(path: Path) -> Path:
    """The one lock file of the store at `path`: `<store>.lock` beside it."""
    return path.with_name(path.name + ".lock")


_LOCKS: Dict[str, object] = {}  # one FileLock object per lock file: re-entrant in a thread


@contextmanager
def store_lock(path: Path, wait_s: Optional[float] = None):
    """The exclusive lock of the SQLite store at `path` (filelock.FileLock on `<store>.lock`,
    mode 0600), waited for at most wait_s (LOCK_WAIT_S) before a one-line StoreError. Every
    creator of a store and every `decodelab sync` takes it; it nests within one thread."""
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path.resolve())
    fl = _LOCKS.setdefault(str(lock), FileLock(str(lock), mode=FILE_MODE))
    wait = LOCK_WAIT_S if wait_s is None else wait_s
    try:
        fl.acquire(timeout=wait)
    except Timeout:
        raise StoreError(
            f"{lock}: another process has held this store's lock for {wait:.0f} s (creating the "
            "store or `decodelab sync`); wait for it (or end it), then run `decodelab sync` to "
            "upload the results on disk"
        ) from None
    try:
        yield
    finally:
        fl.release()


def rebuild_hint(path: Path) -> str:
    return (
        f"move it aside (mv {path} {path}.broken), then rebuild it from the results on disk: "
        f"find {path.parent} -name mlflow_run_id -delete && decodelab sync"
    )


def check_header(path: Path) -> None:
    """StoreError within a millisecond for a file that is not an SQLite database."""
    with open(path, "rb") as f:
        header = f.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise StoreError(f"{path} is not an SQLite database (damaged?): {rebuild_hint(path)}")


def _quick_check(path: Path, out: dict) -> None:
    """PRAGMA quick_check and the alembic schema version of `path` into `out` (in a thread)."""
    try:
        con = sqlite3.connect(str(path), timeout=5, check_same_thread=False)
        out["con"] = con
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
            out["problems"] = [r[0] for r in rows if r[0] != "ok"]
            has = con.execute(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='alembic_version'"
            ).fetchone()[0]
            out["version"] = (
                con.execute("SELECT version_num FROM alembic_version").fetchone() if has else None
            )
        finally:
            con.close()
    except sqlite3.Error as e:
        out["problems"] = [str(e)]


def check_timeout() -> float:
    text = os.environ.get("DECODELAB_STORE_CHECK_TIMEOUT", "")
    try:
        return float(text) if text else CHECK_TIMEOUT_S
    except ValueError:
        return CHECK_TIMEOUT_S


def integrity(path: Path, timeout: Optional[float] = None) -> Optional[str]:
    """Check the SQLite file at `path` within `timeout` seconds (check_timeout(); 0 skips the
    scan): its header, `PRAGMA quick_check`, and its alembic schema version, returned (None if
    it has no alembic_version table). StoreError naming the file and the way out otherwise."""
    path = path.resolve()
    check_header(path)
    timeout = check_timeout() if timeout is None else timeout
    out: dict = {}
    t = threading.Thread(target=_quick_check, args=(path, out), daemon=True)
    t.start()
    t.join(timeout if timeout > 0 else None)
    if t.is_alive():
        try:
            out["con"].interrupt()  # the scan stops at its next page; the thread ends with it
        except (KeyError, sqlite3.Error):
            pass
        raise StoreError(
            f"{path}: its integrity check did not finish in {timeout:.0f} s (a hung file system, "
            "or a very large store: set DECODELAB_STORE_CHECK_TIMEOUT=SECONDS to allow longer)"
        )
    if out.get("problems"):
        what = "; ".join(out["problems"][:3])[:300]
        raise StoreError(f"{path} is damaged (SQLite: {what}): {rebuild_hint(path)}")
    v = out.get("version")
    return v[0] if v else None


def private_file(path: Path) -> None:
    """Create `path` empty with mode 0600 (an error if it exists)."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE))
    os.chmod(path, FILE_MODE)


def finish_file(tmp: Path, final: Path) -> None:
    """A complete SQLite file `tmp` into place at `final` atomically: its write-ahead log folded
    in (no -wal/-shm beside the temporary name), flushed to disk, 0600, renamed."""
    con = sqlite3.connect(str(tmp))
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("PRAGMA journal_mode=DELETE")
    finally:
        con.close()
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


def remove_quietly(tmp: Path) -> None:
    for p in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


@functools.lru_cache(maxsize=None)
def tune_sqlite() -> None:
    """SQLite stores in WAL mode with synchronous=NORMAL and a long busy timeout. One MLflow call
    commits several times; with SQLite's default rollback journal each commit waits for an fsync,
    which made a run ~5x slower to record (and a new store ~7x slower to create). WAL stays
    durable when a process dies (only a power cut can lose the last commits), lets readers run
    beside the writer, and the busy timeout makes parallel Hydra jobs wait for the write lock
    instead of failing. WAL needs a local file system: use a tracking server on shared storage."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _pragmas(dbapi_conn, _record):  # noqa: ANN001
        if isinstance(dbapi_conn, sqlite3.Connection):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()


def prepare_sqlite(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
