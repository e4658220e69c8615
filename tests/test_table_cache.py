"""Operator tables are read once per process and per content (opcost.tablecache): a table edited
in place during a session is read again on the next design, with nothing cleared by hand."""

from __future__ import annotations

import os
import shutil

import decodelab
import pandas as pd
from decodelab.opcost import tablecache
from decodelab.paths import DATA_DIR

GEMM = DATA_DIR / "operators" / "h100_sxm_gemm_trtllm_1.2.0rc5.parquet"  # hardware=h100_sxm's


def _tpot(table, *more) -> float:
    r = decodelab.evaluate(
        "hardware=h100_sxm", f"hardware.op_tables.gemm={table}", "workload.output_len=16", *more
    )
    assert r.status == "ok", r.reason
    return r.metrics["tpot_ms"]


def test_table_edited_in_place_is_read_again(tmp_path):
    table = tmp_path / "my_gemm.parquet"
    shutil.copy(GEMM, table)
    before = _tpot(table)
    assert _tpot(table) == before  # unchanged file: the cached table
    df = pd.read_parquet(table)
    df.assign(latency_ms=df.latency_ms * 2).to_parquet(table)
    st = os.stat(table)
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later edit, whatever the clock
    after = _tpot(table)
    assert after > before * 1.2  # slower GEMMs: a longer step
    tablecache.clear()
    assert _tpot(table) == after  # what a fresh process reads


def test_unchanged_tables_stay_cached(tmp_path, monkeypatch):
    """The second design on an unchanged table reads no file."""
    from decodelab.opcost import tables

    table = tmp_path / "g.parquet"
    shutil.copy(GEMM, table)
    _tpot(table)
    reads = []
    real = tables.read
    monkeypatch.setattr(tables, "read", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    _tpot(table)
    assert reads == []


def test_tables_come_from_the_disk_cache_in_a_new_process(tmp_path, monkeypatch):
    """A process after the first reads no table (no pandas, no SciPy): the readers' results are
    on disk per table content; the same numbers, read-only arrays; a broken pickle is computed
    again."""
    from decodelab.opcost import gemm, tables

    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    tablecache._root.cache_clear()
    tablecache.clear()
    table = tmp_path / "g.parquet"
    shutil.copy(GEMM, table)
    try:
        first = _tpot(table)
        digest = tablecache._digest(str(table), table.stat().st_mtime_ns, table.stat().st_size)
        pickles = sorted((tmp_path / "cache" / "tables").glob(f"*/gemm.*-{digest}.pkl"))
        assert [p.name.split("-")[0] for p in pickles] == ["gemm.curves", "gemm.measured_row"]
        tablecache.clear()  # what a new process has in memory
        reads = []
        real = tables.read
        monkeypatch.setattr(tables, "read", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
        assert _tpot(table) == first and reads == []
        assert not next(iter(gemm.curves(str(table)).values()))[0].flags.writeable
        pickles[0].write_bytes(b"not a pickle")
        tablecache.clear()
        assert _tpot(table) == first and reads == [str(table)]
    finally:
        tablecache._root.cache_clear()
        tablecache.clear()


def test_code_edited_after_import_keeps_results_in_memory(tmp_path, monkeypatch):
    """A table reader's source edited after this process imported it (another run editing opcost)
    turns the disk cache off: the results the old code computes are not stored under the key of
    the new code."""
    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    first, (mtime_ns, size, text) = next(iter(tablecache._CODE_AT_IMPORT.items()))
    try:
        tablecache._root.cache_clear()
        assert tablecache._root() is not None
        edited = {**tablecache._CODE_AT_IMPORT, first: (mtime_ns - 1, size, text)}
        monkeypatch.setattr(tablecache, "_CODE_AT_IMPORT", edited)
        tablecache._root.cache_clear()
        assert tablecache._root() is None
    finally:
        tablecache._root.cache_clear()


def test_shipped_data_moved_in_a_process_reads_its_own_tables(tmp_path, monkeypatch):
    """A table named relative to the shipped data (hardware YAMLs' `operators/...`) is the file
    the data directory holds now: a process that moved it (tests do) and moved it back reads
    the shipped table again, and never stores the moved table's results under the shipped
    table's content (a later process would read them)."""
    from decodelab import paths

    monkeypatch.setenv("DECODELAB_CACHE", str(tmp_path / "cache"))
    tablecache._root.cache_clear()
    tablecache.clear()
    shipped = DATA_DIR
    data = tmp_path / "data"
    (data / "operators").mkdir(parents=True)
    for f in DATA_DIR.iterdir():  # the shipped data, its GEMM table a copy with doubled times
        if f.name != "operators":
            (data / f.name).symlink_to(f)
    for f in (DATA_DIR / "operators").iterdir():
        if f != GEMM:
            (data / "operators" / f.name).symlink_to(f)
    shutil.copy2(GEMM, data / "operators" / GEMM.name)
    df = pd.read_parquet(data / "operators" / GEMM.name)
    df.assign(latency_ms=df.latency_ms * 2).to_parquet(data / "operators" / GEMM.name)
    try:
        before = _tpot(f"operators/{GEMM.name}")
        monkeypatch.setattr(paths, "DATA_DIR", data)
        doubled = _tpot(f"operators/{GEMM.name}")
        assert doubled > before * 1.2
        monkeypatch.setattr(paths, "DATA_DIR", shipped)
        assert _tpot(f"operators/{GEMM.name}") == before
        small = _tpot(f"operators/{GEMM.name}", "model=llama3_2_1b")  # shapes first read now
        tablecache.clear()  # a new process: the shipped table's results on disk
        assert _tpot(f"operators/{GEMM.name}", "model=llama3_2_1b") == small
        monkeypatch.setenv("DECODELAB_TABLE_CACHE", "0")
        tablecache._root.cache_clear()
        tablecache.clear()
        assert _tpot(f"operators/{GEMM.name}", "model=llama3_2_1b") == small  # read from the table
    finally:
        tablecache._root.cache_clear()
        tablecache.clear()
