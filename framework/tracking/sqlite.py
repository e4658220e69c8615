"""The local SQLite tracking store: a quick check that a file is SQLite, an exclusive lock beside the
store for its first opening, and the pragmas that make MLflow's many small commits cheap. No MLflow
here: framework/tracking/store.py opens the store through these."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from pathlib import Path


class StoreError(RuntimeError):
    """The tracking store cannot be used (a corrupted file, a lock held too long): one line
    naming the file and what to do."""


SQLITE_HEADER = b"SQLite format 3\x00"
LOCK_WAIT_S = 120.0  # a store's first opening waits this long for another process's


def check_sqlite(path: Path) -> None:
    """Fail within a second on a file that is not an SQLite database (MLflow would retry for
    minutes): StoreError naming the file and what to do."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        header = f.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        path = path.resolve()
        raise StoreError(
            f"{path} is not an SQLite database (corrupted?): move it away (mv {path} {path}.broken) "
            f"and run `decodelab sync` to upload the results on disk into a new store"
        )


@contextmanager
def store_lock(path: Path, wait_s: float = LOCK_WAIT_S):
    """An exclusive lock on `<store>.lock` beside a SQLite store, waited for at most wait_s."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as f:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > wait_s:
                    raise StoreError(
                        f"{lock}: another process has held this store's lock for {wait_s:.0f} s; "
                        "wait for it (or end it) and run `decodelab sync` to upload what is on disk"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=None)
def tune_sqlite() -> None:
    """SQLite stores in WAL mode with synchronous=NORMAL and a long busy timeout. One MLflow call
    commits several times; with SQLite's default rollback journal each commit waits for an fsync,
    which made a run ~5x slower to record (and a new store ~7x slower to create). WAL stays
    durable when a process dies (only a power cut can lose the last commits), lets readers run
    beside the writer, and the busy timeout makes parallel Hydra jobs wait for the write lock
    instead of failing. WAL needs a local file system: use a tracking server on shared storage."""
    import sqlite3
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
