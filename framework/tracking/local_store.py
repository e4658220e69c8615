"""Opening a local SQLite tracking store safely, once per process and per file.

- An existing store is checked before MLflow sees it, within seconds (tracking/sqlite.py:
  header, `PRAGMA quick_check` in a thread with a time limit, the alembic schema version against
  the installed MLflow's): a damaged or out-of-date store is one StoreError line naming the file
  and the way out, not minutes of MLflow retries. The verdict is kept per (file, mtime, size).
- A new store is created and migrated in a 0600 temporary file beside it and renamed into place
  only when complete, under the store's one lock (`<store>.lock`): a full disk or an interrupt
  never leaves a half-migrated store at the final path, and two processes never create it twice.
- Migrating an empty file through MLflow's alembic revisions (68 in 3.17) takes 1-2 s each
  time. The first migration an installed MLflow makes is kept, its Default experiment left out, as a
  template in decodelab's cache (`<cache>/mlflow-stores/mlflow-<version>-<schema head>.db`,
  paths.cache_root); a later new store starts as a copy of it, and MLflow, opening it, adds the
  Default experiment as it does to any store that lacks one (its artifact location from the
  working directory, as a migration would set it). A template that fails its integrity check
  or is at another schema is not used; a cache that cannot be written leaves the migration.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Optional, Set, Tuple

from decodelab.paths import cache_root
from decodelab.tracking.sqlite import (
    StoreError,
    finish_file,
    integrity,
    private_file,
    rebuild_hint,
    remove_quietly,
    store_lock,
)

_CHECKED: Set[Tuple[str, int, int]] = set()  # (file, mtime_ns, size) that passed the check


@functools.lru_cache(maxsize=None)
def schema_head() -> str:
    """The alembic revision the installed MLflow's tracking schema is at."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def _known(revision: str) -> bool:
    """Whether `revision` is one of the installed MLflow's migrations (else: a newer MLflow's)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    try:
        return ScriptDirectory.from_config(_get_alembic_config(db_url="")).get_revision(revision) is not None
    except Exception:
        return False


def check_store(path: Path) -> None:
    """StoreError unless the SQLite store at `path` is sound and at the installed MLflow's
    schema; each file (mtime, size) is checked once per process."""
    path = path.resolve()
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key in _CHECKED:
        return
    version = integrity(path)
    head = schema_head()
    if version is None:
        raise StoreError(
            f"{path} has no MLflow schema version (a creation that was interrupted, or not an "
            f"MLflow store): {rebuild_hint(path)}"
        )
    if version != head:
        if _known(version):
            raise StoreError(
                f"{path} is at MLflow schema {version}, this MLflow needs {head}: back it up "
                f"(cp {path} {path}.bak), then run `mlflow db upgrade sqlite:///{path}`"
            )
        raise StoreError(
            f"{path} was written by a newer MLflow (schema {version}, this one knows up to "
            f"{head}): upgrade mlflow (pip install -U mlflow) or use another tracking.uri"
        )
    _CHECKED.add(key)


def _migrate(tmp: Path) -> None:
    """MLflow's tables, migrations and Default experiment into the empty SQLite file `tmp`, by
    the store class MLflow itself opens a sqlite URI with (so no two processes race to add the
    Default experiment to a new store); its engine is closed before the file is renamed."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    uri = f"sqlite:///{tmp}"
    store = None
    try:
        store = _get_sqlalchemy_store(uri, None)
    finally:
        engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None) or getattr(store, "engine", None)
        if engine is not None:
            engine.dispose()


def template_path() -> Path:
    """Where the installed MLflow's empty migrated store is kept (module docstring)."""
    import mlflow

    return cache_root() / "mlflow-stores" / f"mlflow-{mlflow.__version__}-{schema_head()}.db"


def _from_template(tmp: Path) -> bool:
    """Copy the template over the empty file `tmp`; False (tmp left empty) where there is no sound
    template at the installed MLflow's schema or the copy fails."""
    tpl = template_path()
    try:
        if not tpl.is_file() or integrity(tpl) != schema_head():
            return False
    except (OSError, StoreError):
        return False
    try:
        shutil.copyfile(tpl, tmp)  # tmp keeps its 0600 mode
    except OSError:
        open(tmp, "wb").close()  # empty again: the migration starts from nothing
        return False
    return True


def _keep_template(migrated: Path) -> None:
    """Save a copy of the freshly migrated store `migrated`, its experiments removed, as the
    template (atomically; best effort: a cache that cannot be written is left alone)."""
    part: Optional[Path] = None
    try:
        tpl = template_path()
        tpl.parent.mkdir(parents=True, exist_ok=True)
        part = tpl.with_name(f"{tpl.name}.tmp-{os.getpid()}")
        remove_quietly(part)
        src, dst = sqlite3.connect(str(migrated)), sqlite3.connect(str(part))
        try:
            src.backup(dst)  # a consistent copy, the write-ahead log's pages included
            dst.execute("PRAGMA journal_mode=DELETE")  # one file
            dst.execute("DELETE FROM experiments")
            dst.commit()
        finally:
            src.close()
            dst.close()
        os.replace(part, tpl)
    except (OSError, sqlite3.Error):
        if part is not None:
            remove_quietly(part)


def create_store(path: Path) -> None:
    """A new, fully migrated store at `path`, built in `<store>.tmp-<pid>` (from the template when
    there is one) and renamed into place; on any failure nothing is left at `path` (nor the
    temporary file)."""
    path = path.resolve()
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    remove_quietly(tmp)  # a leftover of an earlier process with this pid
    try:
        private_file(tmp)
        templated = _from_template(tmp)
        _migrate(tmp)  # from the template: MLflow only adds the Default experiment
        if not templated:
            _keep_template(tmp)
        finish_file(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def open_store(path: Path) -> None:
    """Make the SQLite store at `path` ready for MLflow: check it, or create it (under its lock;
    an empty file counts as absent)."""
    if path.is_file() and path.stat().st_size > 0:
        return check_store(path)
    with store_lock(path):
        if path.is_file() and path.stat().st_size > 0:  # another process made it meanwhile
            return check_store(path)
        create_store(path)
        check_store(path)
