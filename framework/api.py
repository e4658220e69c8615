"""The Python API: evaluate a design, run a sweep, load stored results. Every function takes the
same Hydra overrides as the command line.

    import decodelab
    r = decodelab.evaluate("model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=8")
    print(r.status, r.metrics["tpot_ms"])                 # a decodelab.Result
    df = decodelab.sweep("workload.batch_size=1,2,4,8", "hardware=h100_sxm,sn40l_rack16")
    df[["hardware.name", "workload.batch_size", "tpot_ms"]]
    t = decodelab.grid("hardware.memory.hbm.bandwidth_gb_s=1000,2000,4000", "workload.batch_size=1,8")
    cap = decodelab.slo("workload=open_loop", "hardware=h100_sxm,h200_sxm", ttft_ms=2000, tpot_ms=50)
    old = decodelab.load_results("outputs/multirun")     # every result.json under a directory
    tab = decodelab.load_results("outputs/sweeps/my_sweep")  # a sweep's results.parquet

Bad input raises one typed error, decodelab.ConfigError, with the one-line message the command
line prints (a sweep's SweepError is one); an infeasible design is a Result, never an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from decodelab.config.composition import design_config
from decodelab.config.plan import make_plan
from decodelab.core.result import Result
from decodelab.modes.dispatch import evaluate as _evaluate
from decodelab.config.grid import make_grid
from decodelab.errors import ConfigError
from decodelab.output.flat import flat_params
from decodelab.output.table import TABLE_FILE, read_table
from decodelab.runs.best import DEFAULT_CHILDREN, parse_children
from decodelab.runs.backends import BACKENDS
from decodelab.runs.grid import run_grid
from decodelab.runs.slo import SLO
from decodelab.runs.slo_sweep import check_workload, run_slo_sweep
from decodelab.runs.sweep import run_sweep

__all__ = ["evaluate", "sweep", "grid", "slo", "load_results", "Result"]


def evaluate(*overrides: str, config_dir: Optional[str] = None, keep_steps: bool = False) -> Result:
    """Evaluate one design given by Hydra overrides (`model=...`, `workload.batch_size=8`). Never
    raises for a bad or infeasible design: the Result's status says so, with the reason. A config
    that does not compose (unknown option or key) raises decodelab.ConfigError (one line)."""
    return _evaluate(design_config(overrides, config_dir), keep_steps=keep_steps)


def sweep(
    *overrides: str,
    sweep_file: Optional[str] = None,
    jobs: int = 1,
    track: bool = False,
    progress: bool = False,
    children: str = DEFAULT_CHILDREN,
    backend: str = "local",
    address: Optional[str] = None,
    max_designs: Optional[int] = None,
):
    """Run a sweep (Hydra sweep syntax: `a,b,c`, `range(1,9)`; and/or a sweep file) like
    `decodelab sweep` and return its results table (results.parquet) as a DataFrame, one row
    per design in job order: the resolved config (dotted columns), status, reason, config_hash,
    code_version, every metric, `job` and `reused_from` (the run holding a reused result).
    Results are written under the sweep directory as usual; MLflow only with `track=True`.
    `max_designs`: refuse a larger sweep (default $DECODELAB_MAX_DESIGNS or 1,000,000).
    Raises decodelab.ConfigError for bad input, before anything runs."""
    _check_jobs(jobs)
    _check_choice("children", children, _children_ok)
    _check_choice("backend", backend, lambda b: b in BACKENDS, ", ".join(BACKENDS))
    args = list(overrides) + ([] if track else ["tracking.enabled=false"])
    plan = make_plan(sweep_file, args, max_designs)
    out = run_sweep(plan, jobs=jobs, progress=progress, children=children, backend=backend, address=address)
    return _sorted(read_table(out.table))


def grid(
    *overrides: str,
    sweep_file: Optional[str] = None,
    jobs: int = 1,
    track: bool = False,
    progress: bool = False,
    max_designs: Optional[int] = None,
):
    """A sweep of static decode designs evaluated as arrays, like `decodelab grid`: returns its
    table (pandas; one row per design: `job`, the swept values, status, reason, notes, `path`
    (array / per-design), every metric), also written to `<sweep dir>/results.parquet`.
    MLflow (one parent run, the table as artifact) only with `track=True`. Raises
    decodelab.ConfigError for bad input (and above `max_designs` designs), before anything runs."""
    _check_jobs(jobs)
    args = list(overrides) + ([] if track else ["tracking.enabled=false"])
    out = run_grid(make_grid(sweep_file, args, max_designs), jobs=jobs, progress=progress)
    return read_table(out.path)


def slo(
    *overrides: str,
    ttft_ms: Optional[float] = None,
    tpot_ms: Optional[float] = None,
    e2e_ms: Optional[float] = None,
    pct: int = 90,
    tol: float = 0.02,
    sweep_file: Optional[str] = None,
    jobs: int = 1,
    track: bool = False,
    progress: bool = False,
):
    """The max SLO-bound request rate of every design of a sweep, like `decodelab slo`
    (docs/capacity.md): its results table as a DataFrame (max_rate_rps, goodput_tok_s_per_chip,
    tok_s_per_user, slo_binding, ...; infeasible designs with their reason). The designs need
    `workload=open_loop`. Raises decodelab.runs.slo.SloError for a bad SLO."""
    _check_jobs(jobs)
    s = SLO.from_dict({"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2e_ms": e2e_ms, "pct": pct, "tol": tol})
    plan = make_plan(sweep_file, list(overrides) + ([] if track else ["tracking.enabled=false"]))
    check_workload(plan.base_cfg)
    out = run_slo_sweep(plan, s, jobs=jobs, progress=progress)
    return _sorted(read_table(out.table))


def load_results(path) -> "object":
    """Stored results as a DataFrame: a results table (a `.parquet` file, or a sweep directory
    holding results.parquet), else every result.json under `path` (a run or multirun dir).
    Raises decodelab.ConfigError for a path that does not exist or holds no result."""
    root = Path(path)
    if not root.exists():
        raise ConfigError(f"{path}: no such file or directory; give a run, multirun or sweep directory")
    if root.suffix == ".parquet" or (root.is_dir() and (root / TABLE_FILE).is_file()):
        return _sorted(read_table(root))
    files = [root] if root.is_file() else sorted(root.rglob("result.json"))
    records = []
    for f in files:
        if "mlartifacts" in f.parts:  # MLflow's own copies of uploaded results
            continue
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and "status" in rec:
            rec["dir"] = str(f.parent)
            records.append(rec)
    if not records:
        raise ConfigError(
            f"{path}: no results here (no {TABLE_FILE}, no readable result.json); give a run, "
            "multirun or sweep directory"
        )
    return _frame(records)


def _check_jobs(jobs) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs={jobs!r}: give a worker count, an integer >= 1")


def _children_ok(spec) -> bool:
    try:
        return isinstance(spec, str) and bool(parse_children(spec))
    except ValueError:
        return False


def _check_choice(
    name: str, value, ok, allowed: str = "all, none, or a comma list of pareto and top:N"
) -> None:
    if not ok(value):
        raise ConfigError(f"{name}={value!r}: not one of: {allowed}")


def _sorted(df):
    return df.sort_values("job", kind="stable").reset_index(drop=True) if "job" in df.columns else df


def _frame(records):
    import pandas as pd

    rows = []
    for r in records:
        row = flat_params(r.get("config") or {})  # the results table's and MLflow's flattening
        row.update(
            status=r.get("status"),
            reason=r.get("reason", ""),
            config_hash=r.get("config_hash"),
            **(r.get("metrics") or {}),
        )
        if "dir" in r:
            row["dir"] = r["dir"]
        rows.append(row)
    return pd.DataFrame(rows)
