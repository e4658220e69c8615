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
    slo: {ttft_ms: 2000, tpot_ms: 50, pct: 90}   # optional: each trial is the design's max
                                    # SLO-bound rate (decodelab.runs.slo); objectives default to
                                    # goodput_tok_s_per_chip and tok_s_per_user, both maximised
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

import json
from pathlib import Path
from typing import Dict, List, Optional

from decodelab.paths import SWEEPS_DIR
from decodelab.config import plan as SP
from decodelab.output.files import write_outputs
from decodelab.config.diagnose import describe
from decodelab.config.space import distributions as _distributions
from decodelab.output.progress import progress_bar
from decodelab.output.table import TABLE_FILE, TableWriter, table_row
from decodelab.runs.items import run as run_job
from decodelab.runs.slo import SLO, SloError
from decodelab.runs.slo_sweep import check_workload, evaluate_design

SAMPLERS = ("tpe", "nsga2", "random")
DIRECTIONS = ("maximize", "minimize")
# a space with an `slo:` block: each trial is a design's max SLO-bound rate (decodelab slo)
SLO_OBJECTIVES = {"goodput_tok_s_per_chip": "maximize", "tok_s_per_user": "maximize"}


class SpaceError(ValueError):
    pass


def load_space(target: str) -> dict:
    for p in (Path(target), SWEEPS_DIR / "search" / target, SWEEPS_DIR / "search" / f"{target}.yaml"):
        if p.is_file():
            break
    else:
        names = sorted(p.stem for p in (SWEEPS_DIR / "search").glob("*.yaml"))
        raise SpaceError(f"space {target!r} is neither a file nor one of sweeps/search/: {', '.join(names)}")
    import yaml

    try:
        with p.open() as f:
            space = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        raise SpaceError(describe(e)) from None
    if not isinstance(space, dict):
        raise SpaceError(f"{p}: a search space is a YAML mapping (keys params, objectives, ...)")
    known = {
        "config",
        "overrides",
        "params",
        "objectives",
        "constraints",
        "trials",
        "seed",
        "sampler",
        "name",
        "slo",
    }
    bad = sorted(set(space) - known)
    if bad:
        raise SpaceError(f"{p}: unknown keys {', '.join(bad)}; allowed: {', '.join(sorted(known))}")
    if not isinstance(space.get("params"), dict) or not space["params"]:
        raise SpaceError(
            f"{p}: `params` (the space) must map keys to sweeps, e.g. "
            "`workload.batch_size: int(interval(1, 256))`"
        )
    if space.get("slo") is not None:  # max SLO-bound rate per design (decodelab.runs.slo)
        try:
            space["slo"] = SLO.from_dict(space["slo"], f"{p}: slo.").as_dict()
        except SloError as e:
            raise SpaceError(str(e)) from None
        space.setdefault("objectives", dict(SLO_OBJECTIVES))
    obj = space.get("objectives") or {}
    if not isinstance(obj, dict) or not obj or any(d not in DIRECTIONS for d in obj.values()):
        raise SpaceError(f"{p}: objectives must map metrics to one of {', '.join(DIRECTIONS)}")
    constraints = space.get("constraints") or {}
    if not isinstance(constraints, dict):
        raise SpaceError(f"{p}: constraints must map metrics to {{max: x}} and/or {{min: x}}")
    for m, c in constraints.items():
        if (
            not isinstance(c, dict)
            or not set(c) <= {"max", "min"}
            or not c
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in c.values())
        ):
            raise SpaceError(f"{p}: constraints.{m} must be {{max: x}} and/or {{min: x}} with numbers x")
    if not isinstance(space.get("overrides") or [], list):
        raise SpaceError(f"{p}: overrides must be a list of Hydra overrides")
    for key in ("trials", "seed"):
        v = space.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or (key == "trials" and v < 1)):
            raise SpaceError(f"{p}: {key} must be an integer" + (" >= 1" if key == "trials" else ""))
    if space.get("sampler") is not None and space["sampler"] not in SAMPLERS:
        raise SpaceError(f"{p}: sampler={space['sampler']!r} is not one of: {', '.join(SAMPLERS)}")
    space.setdefault("name", p.stem)
    space["path"] = str(p.resolve())
    return space


def violations(metrics: Optional[Dict[str, float]], constraints: Dict[str, dict]) -> Dict[str, float]:
    """Optuna constraint values (feasible when all <= 0): `runs` (the design fits and is valid;
    metrics None: it did not), then each bound, relative to the bound (one scale for all)."""
    c = {"runs": 0.0 if metrics is not None else 1.0}
    for m, b in constraints.items():
        for side, sign in (("max", 1.0), ("min", -1.0)):
            if side in b:
                c[f"{m}_{side}"] = (
                    1.0 if metrics is None else sign * (metrics[m] - b[side]) / max(abs(b[side]), 1e-12)
                )
    return c


def pareto(points: List[List[float]], directions: List[str]) -> List[int]:
    """Indices of the non-dominated points."""
    sign = [1.0 if d == "minimize" else -1.0 for d in directions]
    p = [[s * x for s, x in zip(sign, pt)] for pt in points]
    front = []
    for i, a in enumerate(p):
        if not any(
            all(y <= x for x, y in zip(a, b)) and any(y < x for x, y in zip(a, b))
            for j, b in enumerate(p)
            if j != i
        ):
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


def run_search(
    space: dict, extra: List[str], trials: int, seed: int, sampler: str, out_dir: Path, progress: bool = True
) -> dict:
    """Run the search; returns {study, rows, front, out_dir}. Writes results.parquet (every
    trial: its resolved design, status, reason, metrics; `job` = the trial number) and the
    result.json files of the front's trials."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = _distributions(space["params"], SpaceError)
    objectives = list(space["objectives"].items())
    constraints = space.get("constraints") or {}
    study = optuna.create_study(directions=[d for _, d in objectives], sampler=make_sampler(sampler, seed))
    plan = SP.make_plan(space.get("config"), list(space.get("overrides") or []) + extra)
    if len(plan.jobs) != 1:
        raise SpaceError("overrides of a search must not sweep (put sweeps in `params`)")
    fixed = plan.jobs[0]
    slo = SLO(**space["slo"]) if space.get("slo") else None
    if slo is not None:
        try:
            check_workload(plan.base_cfg)
        except SloError as e:
            raise SpaceError(str(e)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(
        json.dumps({"kind": "search", "name": space["name"], "space": space["path"]})
    )
    rows, records = [], {}
    composer = SP.composer(plan.source)
    try:
        with progress_bar(progress) as bar, TableWriter(out_dir / TABLE_FILE) as table:
            task = bar.add_task("trials", total=trials)
            for _ in range(trials):
                t = study.ask(dists)
                job = fixed + [f"{k}={v}" for k, v in t.params.items()]
                extra = {}
                if slo is None:
                    cfg, cfg_dict, name, error = SP.prepare(composer, job)
                    res = run_job(cfg, error)
                else:
                    res, cfg_dict, name, binding = evaluate_design(composer, job, slo)
                    extra["slo_binding"] = binding
                row = {"trial": t.number, "status": res["status"], **t.params}
                if res["status"] == "ok":
                    missing = [m for m, _ in objectives if m not in res["metrics"]] + [
                        m for m in constraints if m not in res["metrics"]
                    ]
                    if missing:
                        raise SpaceError(
                            f"metric {missing[0]!r} is not a result of these designs;"
                            f" available: {', '.join(sorted(res['metrics']))}"
                        )
                    values = [float(res["metrics"][m]) for m, _ in objectives]
                    c = violations(res["metrics"], constraints)
                    for k, v in c.items():
                        t.set_constraint(k, v)
                    study.tell(t, values)
                    row.update(
                        {m: v for (m, _), v in zip(objectives, values)},
                        feasible=all(x <= 0 for x in c.values()),
                    )
                    records[t.number] = (cfg_dict, res, name, job)
                else:
                    for k, v in violations(None, constraints).items():  # did not run
                        t.set_constraint(k, v)
                    t.set_user_attr("reason", res["reason"])
                    study.tell(t, state=TrialState.PRUNED)
                    row.update(feasible=False, reason=res["reason"])
                rows.append(row)
                table.write(
                    table_row(res.record(cfg_dict), job=t.number, feasible=bool(row.get("feasible")), **extra)
                )
                bar.advance(task)
    finally:
        SP.reset()
    feasible = [r for r in rows if r.get("feasible")]
    idx = pareto([[r[m] for m, _ in objectives] for r in feasible], [d for _, d in objectives])
    seen, front = set(), []
    for r in sorted((feasible[i] for i in idx), key=lambda r: (r[objectives[0][0]], r["trial"])):
        key = tuple(r[k] for k in dists)
        if key not in seen:  # a design sampled twice is one point of the front
            seen.add(key)
            front.append(r)
    for r in front:
        r["pareto"] = True
        cfg_dict, res, name, job = records[r["trial"]]
        d = out_dir / str(r["trial"])
        files = write_outputs(cfg_dict, res, d, name, plots=False, step_csv=False)
        rec = res.record(cfg_dict)
        rec.update(name=name, dir=str(d), overrides=job, files=list(files.values()))
        r["_record"] = rec
    return {
        "study": study,
        "rows": rows,
        "front": front,
        "objectives": objectives,
        "constraints": constraints,
        "out_dir": out_dir,
        "plan": plan,
    }
