"""The end of a sweep: plots from its results table (the Pareto front, the headline metric
against each swept numeric parameter) in the sweep directory, and the parent run's summary:
counts per status, designs reused, the best designs, the Pareto size, the table and the
plots as artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from decodelab.output.sweep_plots import metric_vs_param, numeric_params, pareto_plot
from decodelab.output.table import read_table
from decodelab.runs import best
from decodelab.tracking.store import sweep_metrics

MAX_PARAM_PLOTS = 4


def plots(plan, out) -> List[Path]:
    """pareto.png and <metric>_vs_<param>.png in the sweep directory (none without ok designs)."""
    ok = [r for r in out.records if r["status"] == "ok"]
    if not ok or out.table is None or not out.table.is_file():
        return []
    files = []
    x_key, y_key = best.OBJECTIVES
    front = set(best.pareto(out.records))
    pos = [i for i, r in enumerate(out.records) if r["status"] == "ok" and x_key in r["metrics"]]
    if pos:
        files.append(
            pareto_plot(
                [out.records[i]["metrics"][x_key] for i in pos],
                [out.records[i]["metrics"][y_key] for i in pos],
                [i in front for i in pos],
                plan.sweep_dir / "pareto.png",
                "tokens/s per user",
                "aggregate tokens/s",
                f"sweep {plan.name}: {len(pos)} feasible designs, {len(front)} on the front",
            )
        )
    try:
        df = read_table(out.table)
    except Exception:
        return files
    for p in numeric_params(df, plan.varied)[:MAX_PARAM_PLOTS]:
        name = f"{best.RANK_BY}_vs_{p.replace('.', '_')}.png"
        files.append(metric_vs_param(df, p, best.RANK_BY, plan.sweep_dir / name, f"sweep {plan.name}"))
    return files


def summary_metrics(plan, out) -> Dict[str, float]:
    """The parent run's metrics: those of every sweep parent (tracking.store.sweep_metrics: n_<status>,
    best_<headline metric>, as a `-m` multirun's parent has them) and this sweep's counts."""
    m: Dict[str, float] = sweep_metrics(out.records)
    m.update({f"n_{k}": v for k, v in out.counts().items()})
    m.update(
        n_designs=len(plan.jobs),
        n_done=len(out.records),
        n_evaluated=len(out.evaluated),
        sweep_seconds=out.seconds,
        n_pareto=len(best.pareto(out.records)),
    )
    return m


def best_tags(out) -> Dict[str, str]:
    tags = {}
    top = best.top(out.records, 1)
    if top:
        r = out.records[top[0]]
        tags["best_design"] = " ".join(r["overrides"]) or r["name"]
        tags["best_job"] = str(r["index"])
    return tags


def finish_parent(plan, out, rec) -> bool:
    """Plots (always) and, with a recorder, the parent run's summary. Whether the parent got it."""
    files = plots(plan, out)
    if rec is None:
        return False
    artifacts: List = [str(out.table)] + [str(f) for f in files]
    return rec.finish(
        "KILLED" if out.interrupted else "FINISHED", summary_metrics(plan, out), artifacts, best_tags(out)
    )
