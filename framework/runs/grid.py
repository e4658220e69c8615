"""`decodelab grid`: a sweep of static decode designs evaluated as arrays, one Parquet table.

Per choice of config groups (model, hardware, kv policy, optimizations, ...), Hydra composes
once (decodelab.config.grid); core.grid evaluates every design of the choice on plain data (one
build per distinct combination of non-bandwidth values, one Numba call per build over all its
bandwidths; the decode walk in closed form where exact). Designs the array path cannot express
(serving, speculative, batch fill, CoE, overrides that are not plain values) are evaluated by the
per-design path (`decodelab.evaluate` on the Hydra-composed job) and say so in the `path` and
`path_reason` columns. Worker processes (joblib) take whole choices; this process writes the
table (decodelab.output.table) as results arrive and, with tracking on, one MLflow parent run
with the table as its artifact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from decodelab.config import grid as G
from decodelab.config import plan as P
from decodelab.core.grid import Block, evaluate_block
from decodelab.core.result import code_version
from decodelab.output.progress import progress_bar
from decodelab.output.table import TABLE_FILE, TableWriter
from decodelab.runs.items import run as run_one

STATUSES = ("ok", "infeasible", "invalid", "error")


@dataclass
class GridOutcome:
    path: Path
    n_designs: int = 0
    counts: Dict[str, int] = field(default_factory=dict)
    array_designs: int = 0
    per_design: Dict[str, int] = field(default_factory=dict)  # reason -> designs
    builds: int = 0
    rows_costed: int = 0
    seconds: float = 0.0
    parent: Optional[str] = None
    tracker_error: Optional[str] = None
    best: Dict[str, object] = field(default_factory=dict)


def evaluate_choice(grid: G.Grid, gidx) -> Dict[str, object]:
    """Every design of one choice of config groups as table columns plus a summary."""
    c = G.choice_of(grid, tuple(gidx))
    n = len(c.jobs)
    if c.base is not None:
        blk = evaluate_block(c.base, c.keys, c.values)
    else:
        blk = Block.empty(n)
        blk.path_reason[:] = c.per_design
    todo = np.nonzero(blk.path_reason != "")[0]
    if len(todo):
        composer = P.composer(grid.source)
        for i in todo:
            cfg, _, _, error = P.prepare(composer, G.overrides_of(grid, int(c.jobs[i])))
            res = run_one(cfg, error)
            blk.status[i], blk.reason[i] = res.status, res.reason
            blk.notes[i] = "; ".join(res.notes) if res.status != "error" else ""
            blk.put(np.array([i]), {k: np.array([v]) for k, v in res.metrics.items()})
    cols: Dict[str, object] = {"job": c.jobs}
    for a in grid.axes:
        if a.group:
            cols[a.key] = np.full(n, _group_value(a, c.groups), dtype=object)
    for k, v in zip(c.keys, c.values):
        cols[k] = _column(v)
    if not c.values:  # a choice given per design: its field values from the job numbers
        for a, s in zip(grid.axes, grid.strides()):
            if not a.group:
                cols[a.key] = _column(np.asarray(a.values, dtype=object)[(c.jobs // s) % len(a.values)])
    cols.update(
        status=blk.status,
        reason=blk.reason,
        notes=blk.notes,
        path=np.where(blk.path_reason == "", "array", "per-design"),
        path_reason=blk.path_reason,
        rows_costed=blk.rows,
    )
    cols.update(blk.metrics)
    reasons: Dict[str, int] = {}
    for r in blk.path_reason[blk.path_reason != ""]:
        reasons[r] = reasons.get(r, 0) + 1
    return {"columns": cols, "n": n, "builds": blk.builds, "per_design": reasons}


def _group_value(axis: G.Axis, groups) -> str:
    for s in groups:
        if s.split("=", 1)[0] == axis.key:
            return s.split("=", 1)[1]
    return ""


def _column(values: np.ndarray):
    """Typed values of an axis as a column (numbers stay numbers)."""
    vals = list(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        if all(isinstance(v, int) for v in vals):
            return np.asarray(vals, dtype=np.int64)
        return np.asarray(vals, dtype=np.float64)
    if all(isinstance(v, bool) for v in vals):
        return np.asarray(vals, dtype=bool)
    return np.asarray([str(v) for v in vals], dtype=object)


def run_grid(grid: G.Grid, jobs: int = 1, progress: bool = True, track: Optional[bool] = None) -> GridOutcome:
    """Evaluate every design of `grid`; the table goes to <sweep dir>/results.parquet."""
    import pandas as pd

    t0 = time.perf_counter()
    grid.sweep_dir.mkdir(parents=True, exist_ok=True)
    out = GridOutcome(grid.sweep_dir / TABLE_FILE, grid.n_jobs)
    out.counts = {s: 0 for s in STATUSES}
    choices = list(grid.choices())
    version = code_version()
    best = (-np.inf, None)
    bar = progress_bar(progress)
    with bar, TableWriter(out.path) as writer:
        task = bar.add_task("evaluated", total=grid.n_jobs)
        for res in _results(grid, choices, jobs):
            cols = res["columns"]
            frame = pd.DataFrame(cols)
            frame["code_version"] = version
            writer.write(frame)
            st = cols["status"]
            for s in STATUSES:
                out.counts[s] += int(np.sum(st == s))
            out.builds += res["builds"]
            for r, k in res["per_design"].items():
                out.per_design[r] = out.per_design.get(r, 0) + k
            out.rows_costed += int(np.sum(cols["rows_costed"]))
            agg = cols.get("tok_s_aggregate")
            if agg is not None and np.any(st == "ok"):
                i = int(np.nanargmax(np.where(st == "ok", agg, -np.inf)))
                if agg[i] > best[0]:
                    best = (
                        float(agg[i]),
                        {k: _scalar(v[i]) for k, v in cols.items() if k in grid.varied or k == "job"},
                    )
            bar.advance(task, res["n"])
    P.reset()  # leave no Hydra context behind (decodelab.evaluate composes afresh)
    out.array_designs = out.n_designs - sum(out.per_design.values())
    out.best = {"tok_s_aggregate": best[0], **(best[1] or {})} if best[1] else {}
    out.seconds = time.perf_counter() - t0
    if track if track is not None else grid.tracking.get("enabled"):
        _record(grid, out)
    return out


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def _results(grid: G.Grid, choices, jobs: int):
    if jobs <= 1 or len(choices) <= 1:
        for g in choices:
            yield evaluate_choice(grid, g)
        return
    from joblib import Parallel, delayed

    with Parallel(n_jobs=min(jobs, len(choices)), return_as="generator_unordered") as par:
        yield from par(delayed(evaluate_choice)(grid, g) for g in choices)


def _record(grid: G.Grid, out: GridOutcome) -> None:
    """One MLflow parent run: the table as artifact, counts and timings as metrics."""
    from decodelab.tracking.recorder import Recorder

    rec = Recorder(
        grid.tracking,
        grid.sweep_dir,
        f"grid {grid.name} {grid.sweep_dir.name}",
        {"kind": "grid", "sweep_name": grid.name, "overrides": " ".join(grid.command_line)[:5000]},
    )
    metrics = {f"n_{k}": v for k, v in out.counts.items()}
    metrics.update(
        n_designs=out.n_designs,
        n_array=out.array_designs,
        n_per_design=out.n_designs - out.array_designs,
        n_builds=out.builds,
        grid_seconds=out.seconds,
    )
    if out.best:
        metrics["best_tok_s_aggregate"] = out.best["tok_s_aggregate"]
    rec.finish("FINISHED", metrics, [str(out.path)])
    out.parent, out.tracker_error = rec.parent, rec.error


def frame(path) -> "object":
    from decodelab.output.table import read_table

    return read_table(path)


__all__: List[str] = ["run_grid", "GridOutcome", "evaluate_choice", "frame"]
