"""The results table (decodelab.output.table): one Parquet file, streamed in row groups, the
union of every row's columns, read back as pandas."""

import math

import pyarrow.parquet as pq
from decodelab.output.table import TABLE_FILE, TableWriter, read_table, table_row, write_table


def _record(i, status="ok", arch_extra=False):
    cfg = {
        "model": {"name": f"m{i % 3}", "layers": 32},
        "workload": {"batch_size": i, "contexts": [1, 2]},
        "speculative": {"enabled": False, "draft": {"name": "x"}},
        "tracking": {"uri": "sqlite:///x.db"},
        "quiet": True,
    }
    if arch_extra:
        cfg["model"]["n_experts"] = 8
    metrics = {"tpot_ms": 1.5 * i} if status == "ok" else {}
    return {
        "status": status,
        "reason": "" if status == "ok" else "does not fit",
        "config": cfg,
        "config_hash": f"h{i}",
        "code_version": "0.2+abc",
        "metrics": metrics,
    }


def test_row_has_params_status_reason_hash_and_metrics():
    row = table_row(_record(4), job=4)
    assert row["model.name"] == "m1" and row["workload.batch_size"] == 4
    assert row["workload.contexts"] == "[1, 2]"  # lists as JSON text
    assert row["speculative.enabled"] is False and "speculative.draft.name" not in row
    assert not any(k.startswith(("tracking", "quiet")) for k in row)
    assert (row["status"], row["config_hash"], row["code_version"], row["tpot_ms"]) == (
        "ok",
        "h4",
        "0.2+abc",
        6.0,
    )


def test_streamed_in_row_groups_with_columns_that_appear_midway(tmp_path):
    path = tmp_path / TABLE_FILE
    with TableWriter(path, row_group_size=10) as w:
        for i in range(25):
            w.write(table_row(_record(i, "infeasible" if i % 5 == 0 else "ok"), job=i))
        for i in range(25, 40):  # a MoE model adds a column; the file still is one table
            w.write(table_row(_record(i, arch_extra=True), job=i))
    assert pq.ParquetFile(path).num_row_groups >= 4
    assert not (tmp_path / (TABLE_FILE + ".parts")).exists()
    df = read_table(tmp_path)  # a sweep directory reads its results.parquet
    assert list(df["job"]) == list(range(40))
    assert df["model.n_experts"].isna().sum() == 25 and (df["model.n_experts"][25:] == 8).all()
    inf = df[df.status == "infeasible"]
    assert len(inf) == 5 and (inf.reason == "does not fit").all() and inf.tpot_ms.isna().all()
    assert math.isclose(df.tpot_ms[7], 10.5)


def test_dataframe_and_chunks_and_type_promotion(tmp_path):
    import pandas as pd

    a = pd.DataFrame({"x": [1, 2], "status": ["ok", "ok"]})
    b = pd.DataFrame({"x": [0.5, 1.5], "status": ["ok", "error"]})
    p = write_table(tmp_path / "t.parquet", [a, b])
    df = read_table(p)
    assert list(df.x) == [1.0, 2.0, 0.5, 1.5] and list(df.status) == ["ok", "ok", "ok", "error"]
    assert list(read_table(p, columns=["x", "no_such"]).columns) == ["x"]  # only those it has
    assert list(read_table(p, columns=lambda c: c != "x").columns) == ["status"]
    p2 = write_table(tmp_path / "e.parquet", [])
    assert len(read_table(p2)) == 0 and "status" in read_table(p2).columns


def test_compare_reads_a_sweep_table(tmp_path):
    """`decodelab compare --table`: the table's rows shaped like MLflow's runs, by a pandas query."""
    from decodelab.apps.compare import from_table, table

    write_table(
        tmp_path / TABLE_FILE,
        [table_row(_record(i, "ok" if i % 2 else "infeasible"), job=i) for i in range(6)],
    )
    df = from_table(str(tmp_path), "status == 'ok' and tpot_ms > 2")
    assert list(df.run_id) == ["job 3", "job 5"] and list(df["metrics.tpot_ms"]) == [4.5, 7.5]
    t = table(df, metrics=["tpot_ms"])
    assert list(t.columns) == ["run_id", "status", "model.name", "workload.batch_size", "tpot_ms"]
