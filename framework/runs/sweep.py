"""`decodelab sweep [SWEEP] [OVERRIDES] [-j N]`: a whole sweep in one command, fast.

The same jobs as `decodelab -m --config-dir sweeps --config-name SWEEP OVERRIDES` (the sweep
file's `hydra.sweeper.params` plus the command line, expanded by Hydra's basic sweeper), without
Hydra's ~0.25 s launch per job: configs are composed once per choice of config groups
(framework/config/plan.py), workers (decodelab.runs.backends: local processes or a Dask cluster)
evaluate chunks of jobs and write each job's result.json under the sweep directory
(`<hydra.sweep.dir>/<job number>/`), and this process streams one row per design into the
sweep's results table (`results.parquet`, decodelab.output.table) and writes the MLflow runs: one
parent per sweep with the table, summary metrics and plots, and child runs for the designs
`children` chooses (decodelab.runs.best: the Pareto front and the top 10 by default, or all).
Designs already recorded (same config hash, which includes the code version) are reused, not
evaluated again, unless `tracking.resume=false` (decodelab.runs.resume).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from decodelab.config import plan as SP
from decodelab.output.flat import flat_params
from decodelab.output.progress import progress_bar
from decodelab.output.table import TABLE_FILE, TableWriter, table_row
from decodelab.runs import best
from decodelab.runs.backends import Backend
from decodelab.runs.items import Chunk
from decodelab.runs.resume import Stored, on_disk, reused_record
from decodelab.runs.summary import best_tags, finish_parent, summary_metrics
from decodelab.tracking.recorder import Recorder
from decodelab.tracking.store import RUN_ID_FILE

STATUSES = ("ok", "infeasible", "invalid", "error")
SUMMARY_METRICS = (
    ("tpot_ms", "TPOT ms", ".3f"),
    ("ttft_ms", "TTFT ms", ".1f"),
    ("tok_s_user", "tok/s user", ".1f"),
    ("tok_s_aggregate", "tok/s agg", ".0f"),
    ("pct_roofline", "% roofline", ".1f"),
)


@dataclass
class Outcome:
    """What a sweep did: one slim record per design (no config: memory stays small), counts,
    where it left them."""

    sweep_dir: Path
    records: List[dict] = field(default_factory=list)
    n_jobs: int = 0
    recorded: int = 0  # child runs written (new runs and links to reused designs)
    tracker_error: Optional[str] = None
    tracking: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    parent: Optional[str] = None
    record_seconds: float = 0.0  # of `seconds`, spent writing MLflow runs
    table: Optional[Path] = None
    backend: str = ""

    @property
    def skipped(self) -> List[dict]:
        """The designs reused (recorded before), not evaluated by this invocation."""
        return [r for r in self.records if r.get("reused_from") is not None]

    @property
    def evaluated(self) -> List[dict]:
        return [r for r in self.records if r.get("reused_from") is None]

    def counts(self) -> Dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for r in self.records:
            c[r["status"]] = c.get(r["status"], 0) + 1
        c["reused"] = len(self.skipped)
        return c


def chunks(plan, jobs: int) -> List[List[tuple]]:
    """Jobs grouped by their choice of config groups (a worker composes each choice once), in
    pieces small enough to balance the workers and show progress."""
    n = len(plan.jobs)
    size = max(1, min(50, math.ceil(n / (4 * max(1, jobs)))))
    by_group: Dict[tuple, List[int]] = {}
    for i, g in enumerate(plan.groups):
        by_group.setdefault(g, []).append(i)
    out = []
    for g, idx in by_group.items():
        for k in range(0, len(idx), size):
            items = [(i, plan.jobs[i]) for i in idx[k : k + size]]
            out.append(Chunk(items, plan.known_groups, g, plan.bases.get(g)))
    return out


def run_sweep(
    plan,
    jobs: int = 1,
    plots: bool = False,
    progress: bool = True,
    children: str = best.DEFAULT_CHILDREN,
    backend: str = "local",
    address: Optional[str] = None,
    workers: Optional[Backend] = None,
) -> Outcome:
    """Evaluate and record every job of `plan` (decodelab.config.plan.make_plan). Raises
    decodelab.runs.backends.BackendError before anything runs if the backend cannot start.
    `workers`: a Backend started before (warm: Backend.warm), used instead of a new one."""
    t0 = time.perf_counter()
    workers = workers or Backend(backend, jobs, address)
    SP.write_plan(plan)
    out = Outcome(plan.sweep_dir, n_jobs=len(plan.jobs), backend=workers.describe())
    tr, rec, stored = plan.tracking, None, Stored()
    if tr.get("enabled"):
        out.tracking = True
        rec = Recorder(
            tr,
            plan.sweep_dir,
            f"sweep {plan.name} {plan.sweep_dir.name}",
            {
                "kind": "sweep",
                "sweep_name": plan.name,
                "overrides": " ".join(plan.command_line)[:5000],
                "children": children,
            },
            params=flat_params,
        )
        out.parent = rec.parent
        if tr.get("resume", True):
            stored = Stored(rec.stored_runs(), rec.sweep_tables(TABLE_FILE, plan.sweep_dir / ".resume"))
    stream = "all" in children.split(",")  # every design a child run: written as they come
    out.table = plan.sweep_dir / TABLE_FILE
    bar = progress_bar(progress)
    with workers, bar, TableWriter(out.table) as table:
        t_eval = bar.add_task("designs", total=len(plan.jobs))
        t_log = bar.add_task("recorded in MLflow", total=len(plan.jobs)) if rec and stream else None
        stop = _Interrupt()
        batches = workers.map(plan, chunks(plan, jobs), stored.origins, plots)
        try:
            for batch in stop.waiting(batches):
                for r in batch:
                    stop.check()  # Ctrl-C: nothing is recorded after it
                    _record(plan, r, stored, rec if stream else None, out, table)
                bar.advance(t_eval, len(batch))
                if t_log is not None:
                    bar.update(t_log, completed=len(out.records))
        except KeyboardInterrupt:
            out.interrupted = True
        finally:
            batches.close()  # cancels the work not done yet (kills local workers)
            stop.restore()
    SP.reset()
    out.records.sort(key=lambda r: r["index"])
    if rec is not None and not stream and not out.interrupted:
        _children(rec, out, children, progress)
    out.seconds = time.perf_counter() - t0
    if rec is not None:
        if _finish(plan, out, rec) and not stream:
            for r in out.records:  # the parent's table holds them: `decodelab sync` skips them
                marker = Path(r["dir"]) / RUN_ID_FILE
                if not r.get("run_id") and not marker.exists():
                    marker.write_text(rec.parent)
        out.recorded, out.tracker_error = rec.n_recorded, rec.error
        out.record_seconds = rec.seconds
    elif not out.interrupted:
        finish_parent(plan, out, None)
    return out


def _finish(plan, out: Outcome, rec: Recorder) -> bool:
    """The parent run's summary; of an interrupted sweep at once (KILLED, its table, no plots)."""
    if not out.interrupted:
        return finish_parent(plan, out, rec)
    return rec.finish("KILLED", summary_metrics(plan, out), [str(out.table)], best_tags(out))


def _record(plan, r: dict, stored: Stored, rec: Optional[Recorder], out: Outcome, table) -> None:
    """One design's row in the table (and its child run, when they are written as they come)."""
    full = _reuse(plan, r, stored) if "skipped" in r else r
    if rec is not None:
        full["run_id"] = _child(rec, full)
    out.records.append(_slim(full))
    table.write(
        table_row(
            full,
            job=full["index"],
            run_id=full.get("run_id") or "",
            reused_from=full.get("reused_from") or "",
            dir=full.get("dir") or "",
        )
    )


def _children(rec: Recorder, out: Outcome, children: str, progress: bool) -> None:
    """The child runs of the designs `children` chooses, once the sweep is done."""
    chosen = sorted(best.children(out.records, children))
    bar = progress_bar(progress and bool(chosen))
    t_child = bar.add_task("child runs", total=len(chosen))
    with bar:
        for i in chosen:
            r = out.records[i]
            if not r.get("here"):  # a design of this directory is already under this parent
                r["run_id"] = _child(rec, _full(r))
            bar.advance(t_child)


def _reuse(plan, r: dict, stored: Stored) -> dict:
    """The full record of a design a worker skipped as recorded: this sweep directory's own
    result.json of an earlier invocation, or the tracker's record, written now as its
    result.json (with `reused_from`) and marked as recorded."""
    d = plan.sweep_dir / str(r["index"])
    h = r["config_hash"]
    rec = on_disk(d, h)
    if rec is not None:
        marker = d / RUN_ID_FILE
        origin = rec.get("reused_from") or (marker.read_text().strip() if marker.is_file() else "")
        rec.update(reused_from=origin, here=True)
    else:
        rec = reused_record(stored, h, r["config"])
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.json").write_text(json.dumps(rec, indent=1, default=str))
        (d / RUN_ID_FILE).write_text(rec["reused_from"])
    rec.update(index=r["index"], name=r["name"], dir=str(d), overrides=r["overrides"])
    rec["files"] = [str(d / "result.json")]
    return rec


def _child(rec: Recorder, full: dict) -> Optional[str]:
    """The design's child run: a new run, or a link to the run holding a reused result."""
    if full.get("reused_from") is not None:
        if full.get("here"):
            return None
        return rec.link(full, full["reused_from"])
    return rec.record(full, [f for f in full["files"] if f])


KEPT_METRICS = {m for m, _, _ in SUMMARY_METRICS} | set(best.OBJECTIVES) | {best.RANK_BY}


def _slim(full: dict) -> dict:
    """What the sweep keeps of a design once its row is in the table: no config, and only the
    metrics of the summary and of choosing child runs (the rest is in the table and on disk)."""
    keep = ("index", "status", "reason", "overrides", "config_hash", "run_id", "dir", "name")
    s = {k: full.get(k) for k in keep}
    s["metrics"] = {k: v for k, v in (full.get("metrics") or {}).items() if k in KEPT_METRICS}
    s["reused_from"] = full.get("reused_from")
    s["here"] = bool(full.get("here"))
    return s


def _full(slim: dict) -> dict:
    """A record again, with its config and files, from its directory."""
    d = Path(slim["dir"])
    rec = json.loads((d / "result.json").read_text())
    rec.update(index=slim["index"], name=slim["name"], dir=str(d), overrides=slim["overrides"])
    rec["reused_from"] = slim["reused_from"]
    rec["files"] = [str(f) for f in d.iterdir() if f.name in FILES]
    return rec


FILES = (
    "result.json",
    "steps.csv",
    "breakdown.png",
    "requests.csv",
    "timeline.csv",
    "latency.png",
    "timeline.png",
)


class _Interrupt:
    """Ctrl-C (SIGINT) stops the sweep at once: while this process waits for the workers it
    raises KeyboardInterrupt there; while it records a design it lets that design finish and
    `check()` raises before the next one. A second Ctrl-C raises wherever it lands."""

    def __init__(self) -> None:
        import signal
        import threading

        self.requested = False
        self.blocked = False  # waiting for the workers: safe to stop right there
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_):
        if self.requested or self.blocked:
            self.requested = True
            raise KeyboardInterrupt
        self.requested = True

    def waiting(self, it):
        """The items of `it`, waited for with Ctrl-C raising at once. A worker pool's error
        after Ctrl-C (its workers got the signal too) counts as the interrupt."""
        it = iter(it)
        while True:
            self.blocked = True
            try:
                item = next(it)
            except StopIteration:
                return
            except Exception:
                if self.requested:
                    raise KeyboardInterrupt from None
                raise
            finally:
                self.blocked = False
            yield item

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def restore(self) -> None:
        import signal

        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
