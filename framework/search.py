"""`decodelab search SPACE [OVERRIDES] [--trials N] [--seed S] [--sampler tpe|nsga2|random]`:
multi-objective design-space search with a current Optuna, driven by a space YAML
(sweeps/search/*.yaml, or a path):

    config: null                    # optional sweep file / primary config to start from
    overrides: [model=llama3_1_70b, workload.prompt_len=4096]   # fixed for every trial
    params:                         # the space, in the Hydra Optuna sweeper's syntax
      hardware: choice(dgx_h100, sn40l_node8, sn40l_rack16)
      workload.batch_size: tag(log, int(interval(1, 256)))
      optimizations: default,all
    objectives: {tok_s_aggregate: maximize, tpot_ms: minimize}
    constraints: {tpot_ms: {max: 100}}   # optional, on any metric (max and/or min)
    trials: 200
    seed: 0
    sampler: tpe

(hydra-optuna-sweeper pins optuna 2.10, whose SQLite storage breaks under SQLAlchemy 2, so the
search runs here, in-process, with Optuna's ask/tell interface.) Every trial is composed and
evaluated like a `decodelab sweep` job. A design that does not fit (infeasible) or is invalid is
a *pruned* trial that violates the constraints, never a crash; user constraints are Optuna
constraints (feasible when <= 0). Seeded samplers make a search repeatable. The Pareto front of
the feasible trials is written as pareto.csv and pareto.png (with trials.csv, all trials) in
outputs/search/..., and logged to MLflow as one run with the front's designs as child runs.
"""
from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from framework.claims import SWEEPS_DIR

SAMPLERS = ("tpe", "nsga2", "random")
DIRECTIONS = ("maximize", "minimize")


class SpaceError(ValueError):
    pass


def load_space(target: str) -> dict:
    for p in (Path(target), SWEEPS_DIR / "search" / target, SWEEPS_DIR / "search" / f"{target}.yaml"):
        if p.is_file():
            break
    else:
        names = sorted(p.stem for p in (SWEEPS_DIR / "search").glob("*.yaml"))
        raise SpaceError(f"space {target!r} is neither a file nor one of sweeps/search/: "
                         f"{', '.join(names)}")
    import yaml
    space = yaml.safe_load(p.read_text()) or {}
    known = {"config", "overrides", "params", "objectives", "constraints", "trials", "seed",
             "sampler", "name"}
    bad = sorted(set(space) - known)
    if bad:
        raise SpaceError(f"{p}: unknown keys {', '.join(bad)}; allowed: {', '.join(sorted(known))}")
    if not isinstance(space.get("params"), dict) or not space["params"]:
        raise SpaceError(f"{p}: `params` (the space) must map keys to sweeps, e.g. "
                         "`workload.batch_size: int(interval(1, 256))`")
    obj = space.get("objectives") or {}
    if not isinstance(obj, dict) or not obj or any(d not in DIRECTIONS for d in obj.values()):
        raise SpaceError(f"{p}: objectives must map metrics to one of {', '.join(DIRECTIONS)}")
    constraints = space.get("constraints") or {}
    if not isinstance(constraints, dict):
        raise SpaceError(f"{p}: constraints must map metrics to {{max: x}} and/or {{min: x}}")
    for m, c in constraints.items():
        if not isinstance(c, dict) or not set(c) <= {"max", "min"} or not c or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in c.values()):
            raise SpaceError(f"{p}: constraints.{m} must be {{max: x}} and/or {{min: x}} "
                             "with numbers x")
    if not isinstance(space.get("overrides") or [], list):
        raise SpaceError(f"{p}: overrides must be a list of Hydra overrides")
    for key in ("trials", "seed"):
        v = space.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or
                              (key == "trials" and v < 1)):
            raise SpaceError(f"{p}: {key} must be an integer" + (" >= 1" if key == "trials"
                                                                  else ""))
    if space.get("sampler") is not None and space["sampler"] not in SAMPLERS:
        raise SpaceError(f"{p}: sampler={space['sampler']!r} is not one of: {', '.join(SAMPLERS)}")
    space.setdefault("name", p.stem)
    space["path"] = str(p.resolve())
    return space


def distributions(params: Dict[str, str]) -> Dict[str, object]:
    """Optuna distributions from Hydra sweep syntax, as hydra-optuna-sweeper maps them:
    choice / a,b,c / range -> categorical; interval -> float (int bounds: int); tag(log, ...)."""
    import optuna.distributions as D
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Transformer
    from hydra.errors import HydraException
    parser = OverridesParser.create()
    out = {}
    for key, spec in params.items():
        try:
            o = parser.parse_override(f"{key}={spec}")
        except HydraException as e:
            raise SpaceError(f"params.{key}={spec!r}: {str(e).splitlines()[0]}") from None
        if o.is_choice_sweep() or o.is_range_sweep():
            out[key] = D.CategoricalDistribution(list(o.sweep_iterator(Transformer.encode)))
        elif o.is_interval_sweep():
            v = o.value()
            log = "log" in v.tags
            if isinstance(v.start, int) and isinstance(v.end, int):
                out[key] = D.IntDistribution(v.start, v.end, log=log)
            else:
                out[key] = D.FloatDistribution(v.start, v.end, log=log)
        else:
            raise SpaceError(f"params.{key}={spec!r} is not a sweep: use choice(...), a,b,c, "
                             "range(...), interval(...) or tag(log, interval(...))")
    return out


def violations(metrics: Optional[Dict[str, float]], constraints: Dict[str, dict]) -> Dict[str, float]:
    """Optuna constraint values (feasible when all <= 0): `runs` (the design fits and is valid;
    metrics None: it did not), then each bound, relative to the bound (one scale for all)."""
    c = {"runs": 0.0 if metrics is not None else 1.0}
    for m, b in constraints.items():
        for side, sign in (("max", 1.0), ("min", -1.0)):
            if side in b:
                c[f"{m}_{side}"] = 1.0 if metrics is None else \
                    sign * (metrics[m] - b[side]) / max(abs(b[side]), 1e-12)
    return c


def pareto(points: List[List[float]], directions: List[str]) -> List[int]:
    """Indices of the non-dominated points."""
    sign = [1.0 if d == "minimize" else -1.0 for d in directions]
    p = [[s * x for s, x in zip(sign, pt)] for pt in points]
    front = []
    for i, a in enumerate(p):
        if not any(all(y <= x for x, y in zip(a, b)) and any(y < x for x, y in zip(a, b))
                   for j, b in enumerate(p) if j != i):
            front.append(i)
    return front


def make_sampler(name: str, seed: int):
    """Optuna >= 5 samplers read the constraints each trial sets (Trial.set_constraint)."""
    import optuna
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SpaceError(f"sampler={name!r} is not one of: {', '.join(SAMPLERS)}")


def run_search(space: dict, extra: List[str], trials: int, seed: int, sampler: str,
               out_dir: Path, progress: bool = True) -> dict:
    """Run the search; returns {study, rows, front, out_dir}. Writes trials.csv and per-trial
    result.json files of the feasible trials."""
    import optuna
    from optuna.trial import TrialState
    from framework import sweep_plan as SP
    from framework.report import result_record, write_outputs
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = distributions(space["params"])
    objectives = list(space["objectives"].items())
    constraints = space.get("constraints") or {}
    study = optuna.create_study(directions=[d for _, d in objectives],
                                sampler=make_sampler(sampler, seed))
    plan = SP.make_plan(space.get("config"), list(space.get("overrides") or []) + extra)
    if len(plan.jobs) != 1:
        raise SpaceError("overrides of a search must not sweep (put sweeps in `params`)")
    fixed = plan.jobs[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps({"kind": "search", "name": space["name"],
                                                    "space": space["path"]}))
    rows, records = [], {}
    from framework.sweep import _progress
    composer = SP._composer(plan.source)
    try:
        with _progress(progress) as bar:
            task = bar.add_task("trials", total=trials)
            for _ in range(trials):
                t = study.ask(dists)
                job = fixed + [f"{k}={v}" for k, v in t.params.items()]
                cfg, cfg_dict, name, error = SP.prepare(composer, job)
                res = SP.run(cfg, error)
                row = {"trial": t.number, "status": res["status"], **t.params}
                if res["status"] == "ok":
                    missing = [m for m, _ in objectives if m not in res["metrics"]] + \
                              [m for m in constraints if m not in res["metrics"]]
                    if missing:
                        raise SpaceError(f"metric {missing[0]!r} is not a result of these designs;"
                                         f" available: {', '.join(sorted(res['metrics']))}")
                    values = [float(res["metrics"][m]) for m, _ in objectives]
                    c = violations(res["metrics"], constraints)
                    for k, v in c.items():
                        t.set_constraint(k, v)
                    study.tell(t, values)
                    row.update({m: v for (m, _), v in zip(objectives, values)},
                               feasible=all(x <= 0 for x in c.values()))
                    records[t.number] = (cfg_dict, res, name, job)
                else:
                    for k, v in violations(None, constraints).items():   # did not run
                        t.set_constraint(k, v)
                    t.set_user_attr("reason", res["reason"])
                    study.tell(t, state=TrialState.PRUNED)
                    row.update(feasible=False, reason=res["reason"])
                rows.append(row)
                bar.advance(task)
    finally:
        SP.reset()
    feasible = [r for r in rows if r.get("feasible")]
    idx = pareto([[r[m] for m, _ in objectives] for r in feasible], [d for _, d in objectives])
    seen, front = set(), []
    for r in sorted((feasible[i] for i in idx), key=lambda r: (r[objectives[0][0]], r["trial"])):
        key = tuple(r[k] for k in dists)
        if key not in seen:                 # a design sampled twice is one point of the front
            seen.add(key)
            front.append(r)
    for r in front:
        r["pareto"] = True
        cfg_dict, res, name, job = records[r["trial"]]
        d = out_dir / str(r["trial"])
        files = write_outputs(cfg_dict, res, d, name, plots=False, step_csv=False)
        rec = result_record(cfg_dict, res)
        rec.update(name=name, dir=str(d), overrides=job, files=list(files.values()))
        r["_record"] = rec
    return {"study": study, "rows": rows, "front": front, "objectives": objectives,
            "constraints": constraints,
            "out_dir": out_dir, "plan": plan}


def write_outputs_of(result: dict) -> List[str]:
    import pandas as pd
    out = result["out_dir"]
    rows = [{k: v for k, v in r.items() if k != "_record"} for r in result["rows"]]
    pd.DataFrame(rows).to_csv(out / "trials.csv", index=False)
    pd.DataFrame([{k: v for k, v in r.items() if k != "_record"} for r in result["front"]]).to_csv(
        out / "pareto.csv", index=False)
    return [str(out / "trials.csv"), str(out / "pareto.csv"), str(plot(result))]


def plot(result: dict) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    (mx, dx), (my, dy) = result["objectives"][:2] if len(result["objectives"]) > 1 else \
        (result["objectives"][0], result["objectives"][0])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ok = [r for r in result["rows"] if mx in r]
    feas = [r for r in ok if r["feasible"]]
    viol = [r for r in ok if not r["feasible"]]
    ax.scatter([r[mx] for r in feas], [r[my] for r in feas], s=14, c="#999999", label="feasible")
    if viol:
        ax.scatter([r[mx] for r in viol], [r[my] for r in viol], s=14, marker="x", c="#dd8452",
                   label="violates a constraint")
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
    ax.set_title(f"{len(result['rows'])} trials, {n_pruned} infeasible/invalid (pruned), "
                 f"{len(f)} on the front", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = result["out_dir"] / "pareto.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_search(result: dict, space: dict, artifacts: List[str], seed: int, sampler: str,
               trials: int) -> Optional[str]:
    """One MLflow run for the search (space, counts, CSVs, plot) with the Pareto designs as
    child runs. Returns the tracker error, if any (the files stay on disk)."""
    from framework.recorder import Recorder
    plan = result["plan"]
    if not plan.tracking.get("enabled"):
        return None
    rec = Recorder(plan.tracking, result["out_dir"], f"search {space['name']}",
                   {"kind": "search", "space": space["path"], "sampler": sampler,
                    "seed": str(seed), "objectives": json.dumps(space["objectives"]),
                    "constraints": json.dumps(space.get("constraints") or {})})
    if rec.ok:
        try:
            from mlflow.entities import Param
            rec.client.log_batch(rec.parent, params=[
                Param(f"space.{k}", str(v)[:6000]) for k, v in space["params"].items()][:100])
        except Exception as e:
            from framework.recorder import short_error
            rec.error = short_error(e)
    for r in result["front"]:
        r["run_id"] = rec.record(r["_record"], r["_record"]["files"])
    rows = result["rows"]
    metrics = {"n_trials": len(rows), "n_feasible": sum(1 for r in rows if r.get("feasible")),
               "n_pruned": sum(1 for r in rows if r["status"] != "ok"),
               "n_pareto": len(result["front"])}
    for m, d in result["objectives"]:
        vals = [r[m] for r in result["front"]]
        if vals:
            metrics[f"best_{m}"] = max(vals) if d == "maximize" else min(vals)
    rec.finish("FINISHED", metrics, artifacts + [space["path"]])
    return rec.error


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not >= 1")
    return n


def main(argv: List[str]) -> int:
    import sys
    from rich.console import Console
    from rich.table import Table
    from framework.sweep_plan import SweepError
    ap = argparse.ArgumentParser(prog="decodelab search", description=__doc__.split("\n\n")[0])
    ap.add_argument("space", help="space YAML: a path or a name under sweeps/search/")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides fixed for every trial")
    ap.add_argument("--trials", type=_positive, help="number of trials (default: the space's, "
                    "or 100)")
    ap.add_argument("--seed", type=int, help="sampler seed (default: the space's, or 0)")
    ap.add_argument("--sampler", choices=SAMPLERS, help="default: the space's, or tpe")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    a = ap.parse_intermixed_args(argv)
    try:
        import optuna  # noqa: F401
    except ImportError:
        print("error: decodelab search needs Optuna: pip install 'decodelab[search]'",
              file=sys.stderr)
        return 2
    try:
        space = load_space(a.space)
        trials = a.trials or int(space.get("trials", 100))
        seed = a.seed if a.seed is not None else int(space.get("seed", 0))
        sampler = a.sampler or space.get("sampler", "tpe")
        out = Path("outputs/search") / datetime.now().strftime("%Y-%m-%d") / \
            f"{datetime.now().strftime('%H-%M-%S-%f')}-{space['name']}"
        t0 = time.perf_counter()
        result = run_search(space, a.overrides, trials, seed, sampler, out, not a.quiet)
    except (SpaceError, SweepError) as e:
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return 2
    artifacts = write_outputs_of(result)
    err = log_search(result, space, artifacts, seed, sampler, trials)
    console = Console()
    rows = result["rows"]
    console.print(f"[bold]search {space['name']}[/bold] ({sampler}, seed {seed}): {len(rows)} "
                  f"trials in {time.perf_counter() - t0:.1f} s, "
                  f"{sum(1 for r in rows if r['status'] != 'ok')} pruned (infeasible/invalid), "
                  f"{sum(1 for r in rows if r.get('feasible'))} feasible -> {out}")
    t = Table(title=f"Pareto front ({len(result['front'])} designs)")
    keys = list(space["params"]) + [m for m, _ in result["objectives"]]
    for k in ["trial"] + keys:
        t.add_column(k.split("@")[0], justify="right")
    for r in result["front"]:
        t.add_row(str(r["trial"]), *[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k])
                                     for k in keys])
    console.print(t)
    if err:
        console.print(f"[yellow]warning[/yellow]: not logged to MLflow ({err}); files in {out}")
    return 0
