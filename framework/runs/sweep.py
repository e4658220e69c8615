"""`decodelab sweep [SWEEP] [OVERRIDES] [-j N]`: a whole sweep in one command, fast.

The same jobs as `decodelab -m --config-dir sweeps --config-name SWEEP OVERRIDES` (the sweep
file's `hydra.sweeper.params` plus the command line, expanded by Hydra's basic sweeper), without
Hydra's ~0.25 s launch per job: configs are composed once per choice of config groups
(framework/config/plan.py), worker processes (joblib) evaluate chunks of jobs and write each job's
result.json under the sweep directory (`<hydra.sweep.dir>/<job number>/`), and this process
writes the MLflow runs (one parent, one child per job: framework/tracking/recorder.py) as results arrive.
Designs already recorded (same config hash) are skipped unless `tracking.resume=false`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional
from decodelab.config import plan as SP
from decodelab.tracking.recorder import Recorder
from decodelab.tracking.store import sweep_metrics
from decodelab.runs.items import evaluate_items
from decodelab.output.progress import progress_bar

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
    """What a sweep did: its records (in job order), counts and where it left them."""

    sweep_dir: Path
    records: List[dict] = field(default_factory=list)
    skipped: List[dict] = field(default_factory=list)
    n_jobs: int = 0
    recorded: int = 0
    tracker_error: Optional[str] = None
    tracking: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    parent: Optional[str] = None
    record_seconds: float = 0.0  # of `seconds`, spent writing MLflow runs

    def counts(self) -> Dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for r in self.records:
            c[r["status"]] = c.get(r["status"], 0) + 1
        c["skipped"] = len(self.skipped)
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
    for idx in by_group.values():
        for k in range(0, len(idx), size):
            out.append([(i, plan.jobs[i]) for i in idx[k : k + size]])
    return out


def run_sweep(plan, jobs: int = 1, plots: bool = False, progress: bool = True) -> Outcome:
    """Evaluate and record every job of `plan` (decodelab.config.plan.make_plan)."""
    t0 = time.perf_counter()
    SP.write_plan(plan)
    out = Outcome(plan.sweep_dir, n_jobs=len(plan.jobs))
    tr = plan.tracking
    rec = None
    recorded: Dict[str, str] = {}
    if tr.get("enabled"):
        out.tracking = True
        rec = Recorder(
            tr,
            plan.sweep_dir,
            f"sweep {plan.name} {plan.sweep_dir.name}",
            {"kind": "sweep", "sweep_name": plan.name, "overrides": " ".join(plan.command_line)[:5000]},
        )
        out.parent = rec.parent
        if tr.get("resume", True):
            recorded = rec.recorded_hashes()
    work = chunks(plan, jobs)
    bar = progress_bar(progress)
    with bar:
        t_eval = bar.add_task("evaluated", total=len(plan.jobs))
        t_log = bar.add_task("recorded in MLflow", total=len(plan.jobs)) if rec else None
        stop = _Interrupt()
        try:
            for batch in _results(plan, work, jobs, recorded, plots):
                for r in batch:
                    if "skipped" in r:
                        out.skipped.append(r)
                    else:
                        out.records.append(r)
                bar.advance(t_eval, len(batch))
                if rec is not None:
                    for r in batch:
                        if "skipped" not in r:
                            r["run_id"] = rec.record(r, [f for f in r["files"] if f])
                    bar.update(t_log, completed=rec.n_recorded + len(out.skipped))
                if stop.requested:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            out.interrupted = True
        finally:
            stop.restore()
    SP.reset()
    out.records.sort(key=lambda r: r["index"])
    out.seconds = time.perf_counter() - t0
    summary = write_summary(plan, out)
    if rec is not None:
        c = out.counts()
        rec.finish(
            "KILLED" if out.interrupted else "FINISHED",
            {f"n_{k}": v for k, v in c.items()}
            | sweep_metrics(out.records)
            | {"n_designs": len(plan.jobs), "sweep_seconds": out.seconds},
            [str(summary)],
        )
        out.recorded, out.tracker_error = rec.n_recorded, rec.error
        out.record_seconds = rec.seconds
    return out


class _Interrupt:
    """Ctrl-C stops the sweep after the chunk at hand is recorded (a second one at once)."""

    def __init__(self) -> None:
        import signal
        import threading

        self.requested = False
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        import signal

        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None


def _results(plan, work, jobs: int, recorded, plots: bool):
    """Records per chunk, as they finish (worker processes when jobs > 1)."""
    args = (str(plan.sweep_dir), recorded, plots)
    if jobs <= 1:
        for items in work:
            yield evaluate_items(plan.source, items, *args)
        return
    import warnings
    from joblib import Parallel, delayed

    with warnings.catch_warnings():  # an interrupted sweep leaves tasks unused: expected
        warnings.filterwarnings("ignore", message=".*tasks have been successfully executed")
        with Parallel(n_jobs=jobs, return_as="generator_unordered") as par:
            yield from par(delayed(evaluate_items)(plan.source, items, *args) for items in work)


def summary_rows(plan, out: Outcome) -> List[dict]:
    rows = []
    for r in out.records:
        row = {"job": r["index"], "status": r["status"]}
        job = dict(o.partition("=")[::2] for o in r["overrides"])
        row.update({k: job.get(k, "") for k in plan.varied})
        row.update(r["metrics"])
        row.update(reason=r["reason"], config_hash=r["config_hash"], run_id=r.get("run_id") or "")
        rows.append(row)
    return rows


def write_summary(plan, out: Outcome) -> Path:
    """summary.csv in the sweep directory: one row per job evaluated in this invocation."""
    import pandas as pd

    path = plan.sweep_dir / "summary.csv"
    pd.DataFrame(summary_rows(plan, out)).to_csv(path, index=False)
    return path
