"""Multi-objective design-space search (Optuna) over a space YAML: maximise or minimise metrics
under constraints (e.g. must fit memory); the Pareto front as a table, CSV, plot and MLflow runs.

  decodelab search llama70b_throughput_latency --trials 200"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import List, Optional

from decodelab.apps.common import errors, run_module
from decodelab.config.sweepfile import SweepError
from decodelab.runs.search import SAMPLERS, SLO_OBJECTIVES, SpaceError, load_space, run_search
from decodelab.runs.slo import SloError
from decodelab.tracking.recorder import Recorder
from decodelab.output.flat import flat_params


def write_outputs_of(result: dict) -> List[str]:
    import pandas as pd

    out = result["out_dir"]
    rows = [{k: v for k, v in r.items() if k != "_record"} for r in result["rows"]]
    pd.DataFrame(rows).to_csv(out / "trials.csv", index=False)
    pd.DataFrame([{k: v for k, v in r.items() if k != "_record"} for r in result["front"]]).to_csv(
        out / "pareto.csv", index=False
    )
    files = [str(out / "trials.csv"), str(out / "pareto.csv"), str(plot(result))]
    return files + [str(out / "results.parquet")] if (out / "results.parquet").is_file() else files


def plot(result: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (mx, dx), (my, dy) = (
        result["objectives"][:2]
        if len(result["objectives"]) > 1
        else (result["objectives"][0], result["objectives"][0])
    )
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ok = [r for r in result["rows"] if mx in r]
    feas = [r for r in ok if r["feasible"]]
    viol = [r for r in ok if not r["feasible"]]
    ax.scatter([r[mx] for r in feas], [r[my] for r in feas], s=14, c="#999999", label="feasible")
    if viol:
        ax.scatter(
            [r[mx] for r in viol],
            [r[my] for r in viol],
            s=14,
            marker="x",
            c="#dd8452",
            label="violates a constraint",
        )
    f = result["front"]
    ax.plot([r[mx] for r in f], [r[my] for r in f], "o-", c="#c44e52", ms=5, label="Pareto front")
    ys = [r[my] for r in ok if r[my] > 0]
    if ys and max(ys) / min(ys) > 30:
        ax.set_yscale("log")
    for m, b in (result.get("constraints") or {}).items():
        for side in ("max", "min"):
            if side in b and m in (mx, my):
                (ax.axhline if m == my else ax.axvline)(b[side], ls="--", c="#555555", lw=0.8)
    n_pruned = len(result["rows"]) - len(ok)
    ax.set_xlabel(f"{mx} ({dx})")
    ax.set_ylabel(f"{my} ({dy})")
    ax.set_title(
        f"{len(result['rows'])} trials, {n_pruned} infeasible/invalid (pruned), {len(f)} on the front",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = result["out_dir"] / "pareto.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_search(
    result: dict, space: dict, artifacts: List[str], seed: int, sampler: str, trials: int
) -> Optional[str]:
    """One MLflow run for the search (space, counts, CSVs, plot) with the Pareto designs as
    child runs. Returns the tracker error, if any (the files stay on disk)."""
    plan = result["plan"]
    if not plan.tracking.get("enabled"):
        return None
    rec = Recorder(
        plan.tracking,
        result["out_dir"],
        f"search {space['name']}",
        {
            "kind": "search",
            "space": space["path"],
            "sampler": sampler,
            "seed": str(seed),
            "objectives": json.dumps(space["objectives"]),
            "constraints": json.dumps(space.get("constraints") or {}),
            **({"slo": json.dumps(space["slo"])} if space.get("slo") else {}),
        },
        params=flat_params,
    )
    rec.log_parent_params({f"space.{k}": v for k, v in space["params"].items()})
    for r in result["front"]:
        r["run_id"] = rec.record(r["_record"], r["_record"]["files"])
    rows = result["rows"]
    metrics = {
        "n_trials": len(rows),
        "n_feasible": sum(1 for r in rows if r.get("feasible")),
        "n_pruned": sum(1 for r in rows if r["status"] != "ok"),
        "n_pareto": len(result["front"]),
    }
    for m, d in result["objectives"]:
        vals = [r[m] for r in result["front"]]
        if vals:
            metrics[f"best_{m}"] = max(vals) if d == "maximize" else min(vals)
    rec.finish("FINISHED", metrics, artifacts + [space["path"]])
    return rec.error


def _raw_keys(space: dict) -> set:
    """The keys the space file itself gives (load_space fills in defaults)."""
    import yaml

    return set(yaml.safe_load(Path(space["path"]).read_text()) or {})


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not >= 1")
    return n


def add_arguments(ap) -> None:
    ap.add_argument("space", help="space YAML: a path or a name under sweeps/search/")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides fixed for every trial")
    ap.add_argument("--trials", type=_positive, help="number of trials (default: the space's, or 100)")
    ap.add_argument("--seed", type=int, help="sampler seed (default: the space's, or 0)")
    ap.add_argument("--sampler", choices=SAMPLERS, help="default: the space's, or tpe")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(a) -> int:
    return run_space(a.space, a.overrides, a)


def run_space(target: str, overrides: List[str], a, slo_from=None) -> int:
    """The search of space `target`; `slo_from(a, space's slo block)` (decodelab slo) sets the
    space's SLO from the command's flags."""
    from rich.console import Console
    from rich.table import Table

    try:
        import optuna  # noqa: F401
    except ImportError:
        return errors("decodelab search needs Optuna: pip install 'decodelab[search]'")
    try:
        space = load_space(target)
        if slo_from is not None:
            space["slo"] = slo_from(a, space.get("slo")).as_dict()
            if "slo" not in _raw_keys(space):  # a space for another question: the SLO's objectives
                space["objectives"] = dict(SLO_OBJECTIVES)
        trials = a.trials or int(space.get("trials", 100))
        seed = getattr(a, "seed", None)
        seed = seed if seed is not None else int(space.get("seed", 0))
        sampler = getattr(a, "sampler", None) or space.get("sampler", "tpe")
        out = (
            Path("outputs/search")
            / datetime.now().strftime("%Y-%m-%d")
            / f"{datetime.now().strftime('%H-%M-%S-%f')}-{space['name']}"
        )
        t0 = time.perf_counter()
        result = run_search(space, overrides, trials, seed, sampler, out, not a.quiet)
    except (SpaceError, SweepError, SloError) as e:
        return errors(str(e))
    artifacts = write_outputs_of(result)
    err = log_search(result, space, artifacts, seed, sampler, trials)
    console = Console()
    rows = result["rows"]
    console.print(
        f"[bold]search {space['name']}[/bold] ({sampler}, seed {seed}): {len(rows)} "
        f"trials in {time.perf_counter() - t0:.1f} s, "
        f"{sum(1 for r in rows if r['status'] != 'ok')} pruned (infeasible/invalid), "
        f"{sum(1 for r in rows if r.get('feasible'))} feasible -> {out}"
    )
    t = Table(title=f"Pareto front ({len(result['front'])} designs)")
    keys = list(space["params"]) + [m for m, _ in result["objectives"]]
    for k in ["trial"] + keys:
        t.add_column(k.split("@")[0], justify="right")
    for r in result["front"]:
        t.add_row(str(r["trial"]), *[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys])
    console.print(t)
    if err:
        console.print(f"[yellow]warning[/yellow]: not logged to MLflow ({err}); files in {out}")
    return 0


def main(argv: List[str]) -> int:
    return run_module("search", sys.modules[__name__], argv)
