"""Resume that never lies: what a sweep may reuse instead of evaluating, and the record it then
writes for the design.

The key is the config hash (decodelab.core.result.config_hash): the resolved design, the bytes
of the files it names and the code version (package version + a hash of the package's code,
shipped data and configs), so a result of other code or inputs is never reused. A design is found

- in this sweep directory: `<sweep dir>/<job>/result.json` of an earlier invocation with the
  same hash (an interrupted sweep run again);
- in the tracker: a finished run of that design (`config_hash` tag), or a row of the results
  table (`results.parquet`) of an earlier sweep's parent run, when the sweep recorded only some
  designs as child runs.

Only `ok`, `infeasible` and `invalid` results are reused; an `error` (a crash) runs again. A
reused design is still a row of the new sweep's table (`reused_from` names the run holding the
original), has its own `result.json` (with `reused_from`) and, if it is one of the sweep's
child runs, a link run under the new parent."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from decodelab.core.result import code_version
from decodelab.output.table import CORE_COLUMNS, read_table

REUSABLE = ("ok", "infeasible", "invalid")
EXTRA_COLUMNS = ("job", "run_id", "reused_from", "dir")  # table columns that are not metrics


class Stored:
    """Results the tracker holds, by config hash (see the module docstring)."""

    def __init__(self, runs: Optional[Dict[str, dict]] = None, tables: List[Tuple[str, Path]] = ()) -> None:
        runs = {h: r for h, r in (runs or {}).items() if r.get("status") in REUSABLE}
        self._runs = runs
        self.origins: Dict[str, str] = {h: r["run_id"] for h, r in runs.items()}
        self._where: Dict[str, Path] = {}
        self._rows: Dict[Path, Dict[str, dict]] = {}
        for parent, path in tables:
            try:
                df = read_table(path, columns=["config_hash", "status", "reused_from"])
            except Exception:  # an unreadable table is not a result: those designs run again
                continue
            if "config_hash" not in df.columns or "status" not in df.columns:
                continue
            reused = df["reused_from"] if "reused_from" in df.columns else [""] * len(df)
            for h, st, rf in zip(df["config_hash"], df["status"], reused):
                if st in REUSABLE and h and h not in self.origins:
                    self.origins[h] = rf if isinstance(rf, str) and rf else parent
                    self._where[h] = path

    def __len__(self) -> int:
        return len(self.origins)

    def record(self, h: str) -> dict:
        """{status, reason, metrics, notes} of a stored design."""
        if h in self._runs:
            r = self._runs[h]
            return {"status": r["status"], "reason": r["reason"], "metrics": dict(r["metrics"]), "notes": []}
        path = self._where[h]
        if path not in self._rows:
            self._rows[path] = _rows_by_hash(read_table(path, columns=lambda c: "." not in c))
        return dict(self._rows[path][h])


def _rows_by_hash(df) -> Dict[str, dict]:
    metrics = [
        c
        for c in df.columns
        if "." not in c and c not in CORE_COLUMNS and c not in EXTRA_COLUMNS and df[c].dtype.kind in "fi"
    ]
    out = {}
    for row in df.to_dict("records"):
        m = {k: float(row[k]) for k in metrics if row[k] is not None and not math.isnan(row[k])}
        out[row["config_hash"]] = {
            "status": row["status"],
            "reason": row.get("reason") or "",
            "metrics": m,
            "notes": [],
        }
    return out


def on_disk(job_dir: Path, h: str) -> Optional[dict]:
    """The record an earlier invocation of this sweep wrote for this job, if its hash is h."""
    f = Path(job_dir) / "result.json"
    if not f.is_file():
        return None
    try:
        rec = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("config_hash") != h or rec.get("status") not in REUSABLE:
        return None
    return rec


def reused_record(stored: Stored, h: str, cfg_dict: dict) -> dict:
    """The result.json record of a design reused from the tracker (code version: this one,
    which the hash includes)."""
    rec = stored.record(h)
    rec.update(config=cfg_dict, config_hash=h, code_version=code_version(), reused_from=stored.origins[h])
    return rec
