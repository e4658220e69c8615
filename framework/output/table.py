"""Results as one columnar table: a Parquet file (pyarrow) with one row per design.

Every sweep writes `<sweep dir>/results.parquet`; `decodelab compare --table`, `decodelab.load_results`
and MLflow's sweep parent run read it. Rows are streamed to the file in row groups, so memory
stays bounded by one row group however many designs a sweep has.

API (stable; other modules and the grid evaluator write through it):

    TABLE_FILE = "results.parquet"
    table_row(record, **extra) -> dict
        A result record (Result.record(cfg_dict) + e.g. index) as one flat row: the resolved
        design params as plain dotted columns (`hardware.name`, `workload.batch_size`; not
        `tracking`, `quiet`, `claim`; an optional feature with `enabled: false` keeps only its
        switch), `status`, `reason`, `config_hash`, `code_version`, every metric by its name,
        then `extra` (`job`, `run_id`, `reused_from`, `dir`, ...). The params are flattened by
        decodelab.output.flat (lists as JSON text), as in MLflow and load_results.
    write_table(path, rows, row_group_size=ROW_GROUP) -> Path
        Write rows to one Parquet file: `rows` is a pandas DataFrame, an iterable of flat dicts,
        or an iterable of chunks (DataFrames or lists of dicts). Streams; returns the path.
    TableWriter(path, row_group_size=ROW_GROUP)
        The streaming writer behind write_table, as a context manager: `.write(rows)` (a dict,
        a list of dicts or a DataFrame), `.rows` (written so far), `.close()` -> Path.
    read_table(path_or_dir, columns=None) -> pandas.DataFrame
        A table file, or the table of a sweep directory (its results.parquet; a writer that
        was killed before closing leaves `results.parquet.parts/`, which is read instead).
        `columns`: a list of names (those the table lacks are left out) or a predicate on a
        column name (`lambda c: "." not in c`: all but the design params).

Schema: columns are the union over all rows; a row without a column has null there. Designs of
different components (a MoE model's extra fields, serving metrics) may add columns in the middle
of a sweep: the writer keeps one Parquet writer while the columns and types fit, and opens a new
part when they do not; closing merges the parts into one file (a column's type is promoted,
e.g. int -> double, null -> string; a column whose parts disagree otherwise becomes text).
With one schema throughout (the common case) the file is written once, without a merge.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

from decodelab.output.flat import flat_params

TABLE_FILE = "results.parquet"
ROW_GROUP = 50_000  # rows per Parquet row group (and per buffered batch)
CORE_COLUMNS = ("status", "reason", "config_hash", "code_version")


def table_row(record: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """One result record as a flat row (see the module docstring)."""
    row = flat_params(record.get("config") or {})
    row.update(
        status=record.get("status"),
        reason=record.get("reason") or "",
        config_hash=record.get("config_hash") or "",
        code_version=record.get("code_version") or "",
    )
    for k, v in (record.get("metrics") or {}).items():
        row[k] = float(v)
    row.update(extra)
    return row


class TableWriter:
    """Streams rows into one Parquet file (see the module docstring)."""

    def __init__(self, path: Union[str, Path], row_group_size: int = ROW_GROUP) -> None:
        self.path = Path(path)
        self.row_group_size = max(1, int(row_group_size))
        self.rows = 0
        self._buffer: List[Dict[str, Any]] = []
        self._parts: List[Path] = []
        self._writer = None
        self._schema = None
        self._spool = self.path.with_name(self.path.name + ".parts")
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._spool.exists():
            shutil.rmtree(self._spool)

    def __enter__(self) -> "TableWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def write(self, rows) -> None:
        """A row (dict), rows (list of dicts) or a pandas DataFrame."""
        if isinstance(rows, dict):
            rows = [rows]
        if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a DataFrame: write as is
            import pyarrow as pa

            self._flush()
            for start in range(0, len(rows), self.row_group_size):
                part = rows.iloc[start : start + self.row_group_size]
                self._write_table(pa.Table.from_pandas(part, preserve_index=False))
            return
        for r in rows:
            self._buffer.append(r)
            if len(self._buffer) >= self.row_group_size:
                self._flush()

    def flush(self) -> None:
        """Write the buffered rows as a row group now (a checkpoint for a long sweep)."""
        self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        import pyarrow as pa

        rows, self._buffer = self._buffer, []
        cols = list(dict.fromkeys(k for r in rows for k in r))  # every row's keys, in order
        arrays = []
        for k in cols:
            values = [r.get(k) for r in rows]
            try:
                arrays.append(pa.array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types in one column: as text
                arrays.append(pa.array([_text(v) for v in values], pa.string()))
        table = pa.Table.from_arrays(arrays, names=cols)
        self._write_table(table)

    def _write_table(self, table) -> None:
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return
        if self._writer is not None:
            fitted = _fit(table, self._schema)
            if fitted is None:
                self._writer.close()
                self._writer = None
            else:
                table = fitted
        if self._writer is None:
            self._spool.mkdir(parents=True, exist_ok=True)
            part = self._spool / f"part-{len(self._parts):05d}.parquet"
            self._parts.append(part)
            self._schema = table.schema
            self._writer = pq.ParquetWriter(part, table.schema)
        self._writer.write_table(table, row_group_size=self.row_group_size)
        self.rows += table.num_rows

    def close(self) -> Path:
        """Write what is buffered and leave one file at `path` (an empty table if no rows)."""
        if self._closed:
            return self.path
        self._closed = True
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if not self._parts:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({c: pa.array([], pa.string()) for c in CORE_COLUMNS}), self.path)
        elif len(self._parts) == 1:
            self._parts[0].replace(self.path)
        else:
            _merge(self._parts, self.path, self.row_group_size)
        if self._spool.exists():
            shutil.rmtree(self._spool)
        return self.path


def _text(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _fit(table, schema):
    """`table` cast to `schema` (missing columns null), or None if it has other columns or a
    value that does not cast."""
    import pyarrow as pa

    if not set(table.column_names) <= set(schema.names):
        return None
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)  # safe cast: int -> double, null -> anything
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    return None
            cols.append(col)
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _merge(parts: List[Path], path: Path, row_group_size: int) -> None:
    """The parts as one file with the union of their columns, one row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = [pq.read_schema(p) for p in parts]
    names = list(dict.fromkeys(n for s in schemas for n in s.names))
    fields = []
    for n in names:
        types = [s.field(n).type for s in schemas if n in s.names]
        try:
            t = (
                pa.unify_schemas([pa.schema([pa.field(n, x)]) for x in types], promote_options="permissive")
                .field(n)
                .type
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            t = pa.string()
        fields.append(pa.field(n, t))
    schema = pa.schema(fields)
    tmp = path.with_name(path.name + ".tmp")
    with pq.ParquetWriter(tmp, schema) as w:
        for p in parts:
            f = pq.ParquetFile(p)
            for i in range(f.num_row_groups):
                t = f.read_row_group(i)
                cols = []
                for fld in schema:
                    if fld.name not in t.column_names:
                        cols.append(pa.nulls(t.num_rows, fld.type))
                        continue
                    c = t.column(fld.name)
                    if c.type != fld.type:
                        try:
                            c = c.cast(fld.type)
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                            c = pa.array([_text(v) for v in c.to_pylist()], pa.string())
                    cols.append(c)
                w.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=row_group_size)
    tmp.replace(path)


def write_table(path: Union[str, Path], rows: Union[Iterable, Any], row_group_size: int = ROW_GROUP) -> Path:
    """Write rows (a DataFrame, dicts, or chunks of either) to one Parquet file; returns it."""
    with TableWriter(path, row_group_size) as w:
        if isinstance(rows, dict) or (hasattr(rows, "to_dict") and hasattr(rows, "columns")):
            w.write(rows)
        else:
            for item in rows:
                w.write(item)
    return w.path


def table_path(path_or_dir: Union[str, Path]) -> Path:
    """The table file of a sweep directory (or the file itself)."""
    p = Path(path_or_dir)
    return p / TABLE_FILE if p.is_dir() and not p.name.endswith(".parts") else p


def _columns(path: Path, columns) -> Optional[List[str]]:
    if columns is None:
        return None
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    if callable(columns):
        return [c for c in names if columns(c)]
    return [c for c in columns if c in names]


def read_table(path_or_dir: Union[str, Path], columns: Optional[List[str]] = None):
    """A results table as a pandas DataFrame (see the module docstring)."""
    import pandas as pd
    import pyarrow.parquet as pq

    p = table_path(path_or_dir)
    if p.is_file():
        return pq.read_table(p, columns=_columns(p, columns)).to_pandas()
    spool = p if p.name.endswith(".parts") else p.with_name(p.name + ".parts")
    parts = sorted(spool.glob("part-*.parquet")) if spool.is_dir() else []
    if not parts:
        raise FileNotFoundError(f"{p}: no results table (results.parquet) there")
    frames = []
    for part in parts:
        try:
            frames.append(pq.read_table(part, columns=_columns(part, columns)).to_pandas())
        except Exception:  # the part a killed writer was writing has no footer
            continue
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
