"""The max SLO-bound rate of every design of a sweep (`decodelab slo SWEEP|OVERRIDES`): the jobs of
`decodelab sweep` (decodelab.config.plan), each searched by decodelab.runs.slo in a worker
(decodelab.runs.backends: processes or a Dask cluster), one row per design in results.parquet
(infeasible designs with their reason), the Pareto front of tok/s per user against goodput per
chip, and one MLflow parent run with the table and the plot (the front's designs as child runs).

A design's record is its resolved config plus an `slo` node (the SLO), so its config hash
differs from the plain serving run's; the binding limit is its `slo_binding` (a table column and
the first note), the rates probed its last note."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from decodelab.config import plan as SP
from decodelab.core.result import Result
from decodelab.output.files import write_outputs
from decodelab.output.progress import progress_bar
from decodelab.output.sweep_plots import pareto_plot
from decodelab.output.table import TABLE_FILE, TableWriter, table_row
from decodelab.runs import best
from decodelab.runs.backends import Backend
from decodelab.runs.items import run as run_job
from decodelab.runs.slo import SLO, SloError, find_max_rate, search_result
from decodelab.tracking.recorder import Recorder
from decodelab.output.flat import flat_params

X, Y = "goodput_tok_s_per_chip", "tok_s_per_user"  # the front: cost side, user side
RANK = "goodput_tok_s_per_chip"


def check_workload(cfg) -> None:
    """The designs must be open-loop Poisson workloads (the rate is what is searched)."""
    w = cfg.workload
    if w.kind != "open_loop":
        raise SloError(
            f"workload.kind={w.kind}: the SLO search varies workload.arrival_rate of an open-loop "
            "workload; add workload=open_loop"
        )
    if w.trace:
        raise SloError(
            f"workload.trace={w.trace}: a trace fixes the arrivals; the SLO search needs Poisson arrivals"
        )


def evaluate_design(composer, job: Sequence[str], slo: SLO):
    """(Result, resolved config dict with the SLO as its `slo` node, name, binding limit) of one
    design's SLO search; the probes are a note of the result."""
    cfg, cfg_dict, name, error = SP.prepare(composer, job)
    if cfg is None:
        return Result.invalid(error), cfg_dict, name, ""
    cfg_dict = dict(cfg_dict, slo=slo.as_dict())
    try:
        check_workload(cfg)
    except SloError as e:
        return Result.invalid(str(e)), cfg_dict, name, ""
    start = float(cfg.workload.arrival_rate)

    def at(rate: float) -> Result:
        c, _, _, err = SP.prepare(composer, list(job) + [f"workload.arrival_rate={rate:.6g}"])
        return run_job(c, err, keep_steps=False)

    search = find_max_rate(at, slo, start)
    res = search_result(search, slo)
    res.notes.append(
        "SLO probes (req/s per replica): "
        + ", ".join(f"{p.rate:g} {'pass' if p.passes else 'fail'}" for p in search.probes)
    )
    return res, cfg_dict, name, search.binding


def slo_items(source, items, sweep_dir: str, recorded, plots: bool, slo: dict) -> List[dict]:
    """decodelab.runs.items.evaluate_items for SLO searches: each job's search, its result.json
    under sweep_dir/<index>/, its record."""
    s = SLO(**slo)
    composer = SP.composer(source)
    out = []
    for index, job in items:
        res, cfg_dict, name, binding = evaluate_design(composer, job, s)
        d = Path(sweep_dir) / str(index)
        files = write_outputs(cfg_dict, res, d, name, plots=plots, step_csv=False)
        rec = res.record(cfg_dict)
        rec.update(index=index, name=name, dir=str(d), overrides=list(job), files=list(files.values()))
        rec["slo_binding"] = binding
        out.append(rec)
    return out


@dataclass
class SloOutcome:
    sweep_dir: Path
    records: List[dict] = field(default_factory=list)
    front: List[int] = field(default_factory=list)  # positions in records
    table: Optional[Path] = None
    plot: Optional[Path] = None
    parent: Optional[str] = None
    tracker_error: Optional[str] = None
    seconds: float = 0.0
    backend: str = ""

    def counts(self) -> Dict[str, int]:
        c = {s: 0 for s in ("ok", "infeasible", "invalid", "error")}
        for r in self.records:
            c[r["status"]] = c.get(r["status"], 0) + 1
        return c

    def best(self, n: int = 10) -> List[dict]:
        return [self.records[i] for i in best.top(self.records, n, RANK)]


def front(records: List[dict]) -> List[int]:
    pos = [i for i, r in enumerate(records) if r["status"] == "ok" and X in r["metrics"]]
    mask = best.pareto_mask([records[i]["metrics"][X] for i in pos], [records[i]["metrics"][Y] for i in pos])
    return [p for p, k in zip(pos, mask) if k]


def plot(out: SloOutcome, slo: SLO, title: str) -> Optional[Path]:
    pos = [i for i, r in enumerate(out.records) if r["status"] == "ok" and X in r["metrics"]]
    if not pos:
        return None
    limits = ", ".join(f"p{slo.pct} {k.upper()} <= {v:g} ms" for k, v in slo.limits().items())
    return pareto_plot(
        [out.records[i]["metrics"][X] for i in pos],
        [out.records[i]["metrics"][Y] for i in pos],
        [i in set(out.front) for i in pos],
        out.sweep_dir / "slo_pareto.png",
        "goodput tokens/s per chip at the max SLO-bound rate",
        "tokens/s per user at that rate",
        f"{title}: {len(pos)} designs meet the SLO, {len(out.front)} on the front\n{limits}",
    )


def run_slo_sweep(
    plan,
    slo: SLO,
    jobs: int = 1,
    progress: bool = True,
    backend: str = "local",
    address: Optional[str] = None,
) -> SloOutcome:
    """Search every job of `plan`; write the table, the plot and the MLflow parent run."""
    t0 = time.perf_counter()
    workers = Backend(backend, jobs, address)
    SP.write_plan(plan)
    out = SloOutcome(plan.sweep_dir, table=plan.sweep_dir / TABLE_FILE, backend=workers.describe())
    fn = functools.partial(slo_items, slo=slo.as_dict())
    bar = progress_bar(progress)
    work = [[(i, job)] for i, job in enumerate(plan.jobs)]  # one design (~10 serving runs) a task
    with workers, bar, TableWriter(out.table) as table:
        task = bar.add_task("designs (SLO search)", total=len(plan.jobs))
        for batch in workers.map(plan, work, {}, False, fn=fn):
            for r in batch:
                out.records.append(r)
                table.write(
                    table_row(
                        r,
                        job=r["index"],
                        dir=r["dir"],
                        slo_binding=r["slo_binding"],
                    )
                )
            bar.advance(task, len(batch))
    SP.reset()
    out.records.sort(key=lambda r: r["index"])
    out.front = front(out.records)
    out.plot = plot(out, slo, f"slo {plan.name}")
    out.seconds = time.perf_counter() - t0
    if plan.tracking.get("enabled"):
        _record(plan, slo, out)
    return out


def summary_metrics(out: SloOutcome) -> Dict[str, float]:
    m: Dict[str, float] = {f"n_{k}": float(v) for k, v in out.counts().items()}
    m.update(n_designs=float(len(out.records)), n_pareto=float(len(out.front)), slo_seconds=out.seconds)
    ok = [r["metrics"] for r in out.records if r["status"] == "ok"]
    for k in (
        "goodput_tok_s_per_chip",
        "max_rate_rps",
        "goodput_tok_s",
        "tok_s_per_user",
        "max_rate_per_chip_rps",
    ):
        vals = [x[k] for x in ok if k in x]
        if vals:
            m[f"best_{k}"] = max(vals)
    return m


def _record(plan, slo: SLO, out: SloOutcome) -> None:
    import json

    rec = Recorder(
        plan.tracking,
        plan.sweep_dir,
        f"slo {plan.name} {plan.sweep_dir.name}",
        {
            "kind": "slo",
            "sweep_name": plan.name,
            "slo": json.dumps(slo.as_dict()),
            "overrides": " ".join(plan.command_line)[:5000],
        },
        params=flat_params,
    )
    out.parent = rec.parent
    rec.log_parent_params({f"slo.{k}": v for k, v in slo.as_dict().items()})
    for i in out.front:
        r = out.records[i]
        r["run_id"] = rec.record(r, [f for f in r["files"] if f])
    tags = {}
    top = out.best(1)
    if top:
        tags = {
            "best_design": " ".join(top[0]["overrides"]) or top[0]["name"],
            "best_job": str(top[0]["index"]),
        }
    files = [str(out.table)] + ([str(out.plot)] if out.plot else [])
    rec.finish("FINISHED", summary_metrics(out), files, tags)
    out.tracker_error = rec.error
