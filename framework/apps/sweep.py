"""Run a whole sweep in one command, fast: a sweep file (a path or a name under sweeps/) and/or
Hydra overrides with sweeps (a,b,c; range(); choice()); the same jobs as `decodelab -m`, evaluated
by worker processes, recorded by one process (docs/sweeps.md).

  decodelab sweep scale/bench_1000 -j 2
  decodelab sweep model=llama3_1_8b,llama3_1_70b workload.batch_size='range(1,65)'"""

from __future__ import annotations

import os
import sys
from typing import Dict, List

from decodelab.apps.common import add_max_designs, errors, narrow_table, run_module, workers
from decodelab.config.plan import make_plan
from decodelab.config.sweepfile import SweepError
from decodelab.runs.backends import BACKENDS, Backend, BackendError
from decodelab.runs.best import DEFAULT_CHILDREN, parse_children
from decodelab.output.files import where_lines
from decodelab.runs.items import warm_up
from decodelab.runs.sweep import SUMMARY_METRICS, Outcome, run_sweep


def print_summary(plan, out: Outcome, top: int = 10) -> None:
    from rich.console import Console

    console = Console()
    c = out.counts()
    rate = len(out.records) / out.seconds if out.seconds else 0.0
    console.print(
        f"[bold]sweep {plan.name}[/bold]: {len(plan.jobs)} designs in "
        f"{out.seconds:.1f} s ({rate:.0f}/s, {out.backend}) -> {out.sweep_dir}"
    )
    console.print(f"  table: {out.table} (decodelab.load_results reads it)")
    console.print("  " + ", ".join(f"{k} {v}" for k, v in c.items() if v or k == "ok"))
    ok = [r for r in out.records if r["status"] == "ok"]
    if ok:
        key = "tok_s_aggregate"
        best = sorted(ok, key=lambda r: -r["metrics"].get(key, 0.0))[:top]
        names = ["job", *[k.split("@")[0].rsplit(".", 1)[-1] for k in plan.varied]]
        names += [label for _, label, _ in SUMMARY_METRICS]
        rows = []
        for r in best:
            job = dict(o.partition("=")[::2] for o in r["overrides"])
            rows.append(
                [
                    str(r["index"]),
                    *[job.get(k, "") for k in plan.varied],
                    *[format(r["metrics"].get(m, float("nan")), f) for m, _, f in SUMMARY_METRICS],
                ]
            )
        numeric = [True] + [False] * len(plan.varied) + [True] * len(SUMMARY_METRICS)
        t = narrow_table(
            f"top {len(best)} of {len(ok)} feasible designs by aggregate tok/s", names, rows, numeric
        )
        console.print(t)
    for status in ("invalid", "error", "infeasible"):
        reasons: Dict[str, int] = {}
        for r in out.records:
            if r["status"] == status:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda x: -x[1])[:3]:
            console.print(f"  {status} x{n}: {reason}")
    if out.skipped:
        console.print(
            f"  {len(out.skipped)} designs already recorded (same config hash and code version) "
            f"were reused, not evaluated again ({len(out.evaluated)} evaluated); "
            "tracking.resume=false evaluates them again"
        )
    if out.tracking:
        if out.tracker_error:
            left = len(out.records) - out.recorded
            console.print(
                f"[yellow]warning[/yellow]: {left} results did not reach the tracker "
                f"({out.tracker_error}); they are in {out.sweep_dir}: upload them with "
                f"`decodelab sync {out.sweep_dir}`"
            )
        else:
            console.print(
                f"  MLflow: parent run {out.parent} with the table, summary and plots; "
                f"{out.recorded} child runs (written in {out.record_seconds:.1f} s)"
            )
    if out.interrupted:
        done = (out.recorded if out.tracking else len(out.records)) + len(out.skipped)
        console.print(
            f"[yellow]interrupted[/yellow]: {done} of {len(plan.jobs)} designs "
            f"{'recorded' if out.tracking else 'done'}; run the same command again to do "
            "only the rest"
        )
    tracking = plan.tracking if out.tracking and not out.tracker_error else None
    console.print(*where_lines(out.sweep_dir, tracking, out.parent, out.table), sep="\n")


def add_arguments(ap) -> None:
    ap.add_argument(
        "args",
        nargs="*",
        metavar="[SWEEP] OVERRIDE",
        help="sweep file or name, then overrides, e.g. model=llama3_1_8b,llama3_1_70b",
    )
    ap.add_argument(
        "-j",
        "--jobs",
        type=workers,
        default=os.cpu_count() or 1,
        help="worker processes (default: CPU count; 1: in this process)",
    )
    ap.add_argument(
        "--plots", action="store_true", help="also write steps.csv and breakdown.png per design (slow)"
    )
    ap.add_argument("--top", type=int, default=10, help="designs in the summary table")
    ap.add_argument(
        "--children",
        type=_children,
        default=DEFAULT_CHILDREN,
        help="which designs become MLflow child runs: all, none, or a comma list of pareto and "
        f"top:N (default {DEFAULT_CHILDREN}); every design is in the parent run's table",
    )
    ap.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: worker processes here (-j); dask: a Dask cluster (pip install 'decodelab[dask]')",
    )
    ap.add_argument(
        "--address",
        help="with --backend dask: the scheduler to use (tcp://host:8786); default: a local cluster of -j workers",
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_max_designs(ap)


def _children(text: str) -> str:
    return parse_children(text)


_children.__name__ = "child-run choice (all, none, or a comma list of pareto and top:N)"


def run(a) -> int:
    first = a.args[0] if a.args else None
    has_target = first is not None and "=" not in first and not first.startswith(("~", "+"))
    sweep, overrides = (first, a.args[1:]) if has_target else (None, a.args)
    workers = Backend("local", a.jobs) if a.backend == "local" and not a.address else None
    if workers is not None:
        workers.warm(warm_up)  # the workers import and start Numba while this process plans
    try:
        plan = make_plan(sweep, overrides, a.max_designs)
    except BaseException as e:  # bad input, Ctrl-C while planning: the warm workers stop
        if workers is not None:
            workers.close()
        if isinstance(e, SweepError):
            return errors(str(e))
        raise
    if a.address and a.backend != "dask":
        return errors("--address needs --backend dask")
    try:
        out = run_sweep(
            plan,
            jobs=a.jobs,
            plots=a.plots,
            progress=not a.quiet,
            children=a.children,
            backend=a.backend,
            address=a.address,
            workers=workers,
        )
    except BackendError as e:
        return errors(str(e))
    print_summary(plan, out, a.top)
    return 130 if out.interrupted else 0


def main(argv: List[str]) -> int:
    return run_module("sweep", sys.modules[__name__], argv)
