"""`decodelab sweep [SWEEP] [OVERRIDES] [-j N]`: a whole sweep in one command, fast.

The same jobs as `decodelab -m --config-dir sweeps --config-name SWEEP OVERRIDES` (the sweep
file's `hydra.sweeper.params` plus the command line, expanded by Hydra's basic sweeper), without
Hydra's ~0.25 s launch per job: configs are composed once per choice of config groups
(framework/sweep_plan.py), worker processes (joblib) evaluate chunks of jobs and write each job's
result.json under the sweep directory (`<hydra.sweep.dir>/<job number>/`), and this process
writes the MLflow runs (one parent, one child per job: framework/recorder.py) as results arrive.
Designs already recorded (same config hash) are skipped unless `tracking.resume=false`.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

STATUSES = ("ok", "infeasible", "invalid", "error")
SUMMARY_METRICS = (("tpot_ms", "TPOT ms", ".3f"), ("ttft_ms", "TTFT ms", ".1f"),
                   ("tok_s_user", "tok/s/user", ".1f"), ("tok_s_aggregate", "tok/s agg", ".0f"),
                   ("pct_roofline", "% roofline", ".1f"))


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
    record_seconds: float = 0.0      # of `seconds`, spent writing MLflow runs

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
            out.append([(i, plan.jobs[i]) for i in idx[k:k + size]])
    return out


def run_sweep(plan, jobs: int = 1, plots: bool = False, progress: bool = True) -> Outcome:
    """Evaluate and record every job of `plan` (framework.sweep_plan.make_plan)."""
    from framework import sweep_plan as SP
    from framework.recorder import Recorder
    t0 = time.perf_counter()
    SP.write_plan(plan)
    out = Outcome(plan.sweep_dir, n_jobs=len(plan.jobs))
    tr = plan.tracking
    rec = None
    recorded: Dict[str, str] = {}
    if tr.get("enabled"):
        out.tracking = True
        rec = Recorder(tr, plan.sweep_dir, f"sweep {plan.name} {plan.sweep_dir.name}",
                       {"kind": "sweep", "sweep_name": plan.name,
                        "overrides": " ".join(plan.command_line)[:5000]})
        out.parent = rec.parent
        if tr.get("resume", True):
            recorded = rec.recorded_hashes()
    work = chunks(plan, jobs)
    bar = _progress(progress)
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
        rec.finish("KILLED" if out.interrupted else "FINISHED",
                   {f"n_{k}": v for k, v in c.items()} | {"n_designs": len(plan.jobs),
                                                           "sweep_seconds": out.seconds},
                   [str(summary)])
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
    from framework.sweep_plan import evaluate_items
    args = (str(plan.sweep_dir), recorded, plots)
    if jobs <= 1:
        for items in work:
            yield evaluate_items(plan.source, items, *args)
        return
    import warnings
    from joblib import Parallel, delayed
    with warnings.catch_warnings():     # an interrupted sweep leaves tasks unused: expected
        warnings.filterwarnings("ignore", message=".*tasks have been successfully executed")
        with Parallel(n_jobs=jobs, return_as="generator_unordered") as par:
            yield from par(delayed(evaluate_items)(plan.source, items, *args) for items in work)


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    return Progress(TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    disable=not enabled)


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


def print_summary(plan, out: Outcome, top: int = 10) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    c = out.counts()
    rate = (len(out.records) + len(out.skipped)) / out.seconds if out.seconds else 0.0
    console.print(f"[bold]sweep {plan.name}[/bold]: {len(plan.jobs)} designs in "
                  f"{out.seconds:.1f} s ({rate:.0f}/s) -> {out.sweep_dir}")
    console.print("  " + ", ".join(f"{k} {v}" for k, v in c.items() if v or k == "ok"))
    ok = [r for r in out.records if r["status"] == "ok"]
    if ok:
        key = "tok_s_aggregate"
        best = sorted(ok, key=lambda r: -r["metrics"].get(key, 0.0))[:top]
        t = Table(title=f"top {len(best)} of {len(ok)} feasible designs by aggregate tok/s")
        t.add_column("job", justify="right")
        for k in plan.varied:
            t.add_column(k.split("@")[0])
        for _, label, _ in SUMMARY_METRICS:
            t.add_column(label, justify="right")
        for r in best:
            job = dict(o.partition("=")[::2] for o in r["overrides"])
            t.add_row(str(r["index"]), *[job.get(k, "") for k in plan.varied],
                      *[format(r["metrics"].get(m, float("nan")), f)
                        for m, _, f in SUMMARY_METRICS])
        console.print(t)
    for status in ("invalid", "error", "infeasible"):
        reasons: Dict[str, int] = {}
        for r in out.records:
            if r["status"] == status:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda x: -x[1])[:3]:
            console.print(f"  {status} x{n}: {reason}")
    if out.skipped:
        console.print(f"  {len(out.skipped)} designs already recorded (same config hash) were "
                      "skipped; tracking.resume=false runs them again")
    if out.tracking:
        if out.tracker_error:
            left = len(out.records) - out.recorded
            console.print(f"[yellow]warning[/yellow]: {left} results did not reach the tracker "
                          f"({out.tracker_error}); they are in {out.sweep_dir}: upload them with "
                          f"`decodelab sync {out.sweep_dir}`")
        else:
            console.print(f"  MLflow: {out.recorded} runs under parent run {out.parent} "
                          f"(written in {out.record_seconds:.1f} s)")
    if out.interrupted:
        done = (out.recorded if out.tracking else len(out.records)) + len(out.skipped)
        console.print(f"[yellow]interrupted[/yellow]: {done} of {len(plan.jobs)} designs "
                      f"{'recorded' if out.tracking else 'done'}; run the same command again to do "
                      "only the rest")


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="decodelab sweep",
        description="Run a sweep in one process group: a sweep file (a path or a name under "
                    "sweeps/) and/or Hydra overrides, with sweeps (a,b,c; range(); choice()).")
    ap.add_argument("args", nargs="*", metavar="[SWEEP] OVERRIDE",
                    help="sweep file or name, then overrides, e.g. model=llama3_1_8b,llama3_1_70b")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes (default: CPU count; 1: in this process)")
    ap.add_argument("--plots", action="store_true",
                    help="also write steps.csv and breakdown.png per design (slow)")
    ap.add_argument("--top", type=int, default=10, help="designs in the summary table")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    a = ap.parse_intermixed_args(argv)
    first = a.args[0] if a.args else None
    has_target = first is not None and "=" not in first and not first.startswith(("~", "+"))
    a.sweep = first if has_target else None
    a.overrides = a.args[1:] if has_target else a.args
    return a


def main(argv: List[str]) -> int:
    import sys
    from framework.sweep_plan import SweepError, make_plan
    a = parse_args(argv)
    try:
        plan = make_plan(a.sweep, a.overrides)
    except SweepError as e:
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return 2
    out = run_sweep(plan, jobs=a.jobs, plots=a.plots, progress=not a.quiet)
    print_summary(plan, out, a.top)
    return 130 if out.interrupted else 0
