"""Claims: the papers' published figures computed from claim sweeps (`decodelab claims`).

A claim sweep is an ordinary Hydra config (runnable on its own with
`decodelab -m --config-dir sweeps --config-name <file>`): its `hydra.sweeper.params` list the
jobs, and its `claim:` block says which figures to compute from the jobs' metrics:

    claim:
      id: C5
      source: SN40L Table IV
      figures:
        - name: tok/s per user           # one figure per published number
          metric: tok_s_user             # any metric of a result
          where: {optimizations.kernel_looping: "true"}   # jobs whose overrides match; a list
          # of such maps matches a job that matches any of them (e.g. each model at its own length)
          ratio: {key: hardware, num: sn40l_rack16, den: dgx_h100}  # optional: metric ratio
          # or ratio: {num: {speculative: draft}, den: {speculative: none}}: jobs paired on
          # every other override
          reduce: max                    # mean (default) | geomean | max | min over jobs/pairs
          times: {metric: spec_tokens_per_round, where: {speculative: mtp}}  # optional: the value
          # times the mean of another metric over the jobs `where` matches (a factor the paper applies)
          published: 1042                # a number (pass within tolerance) or [lo, hi]
          tolerance: 0.15

The shipped claims are sweeps/*.yaml; a researcher's own are sweep files with the same block, run
with `decodelab claims PATH` (a file or a directory of them) and labelled as user claims.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from decodelab.config import compose as C
from decodelab.config import plan as SP
from decodelab.config.composition import compose_job
from decodelab.config.diagnose import did_you_mean, listing
from decodelab.config.sweepfile import load_sweep
from decodelab.errors import ConfigError
from decodelab.modes.dispatch import evaluate
from decodelab.output.files import breakdown_plot
from decodelab.output.progress import progress_bar
from decodelab.paths import SWEEPS_DIR
from decodelab.runs.placeholders import calibration_figures, load_params

REDUCERS = {
    "mean": lambda v: sum(v) / len(v),
    "geomean": lambda v: math.exp(sum(math.log(x) for x in v) / len(v)),
    "max": max,
    "min": min,
}


def _matches(job: Dict[str, str], where) -> bool:
    """`where` is a map of override -> value (all must match) or a list of such maps (any)."""
    if isinstance(where, (list, tuple)):
        return any(_matches(job, w) for w in where)
    # Hydra's sweep iterator spells booleans True/False; YAML may say true/false
    return all(str(job.get(k)).lower() == str(v).lower() for k, v in (where or {}).items())


def check_claim(claim, path: Path) -> List[str]:
    """Problems of a claim block, one line each (a user's sweep file is checked before it runs)."""
    if not isinstance(claim, dict) or not claim.get("id"):
        return [
            f"{path}: the sweep has no claim.id (a claim sweep needs a `claim:` block with id and figures)"
        ]
    e = []
    figs = claim.get("figures")
    if not isinstance(figs, list) or not figs:
        e.append(f"{path}: claim {claim['id']} has no figures (claim.figures: a list)")
    for i, f in enumerate(figs or []):
        missing = [k for k in ("name", "metric", "published") if not isinstance(f, dict) or k not in f]
        if missing:
            e.append(f"{path}: claim.figures[{i}] lacks {', '.join(missing)}")
        elif f.get("reduce", "mean") not in REDUCERS:
            e.append(
                f"{path}: claim.figures[{i}].reduce={f['reduce']!r} is not one of: {', '.join(REDUCERS)}"
            )
    return e


def metric_refs(claim: dict) -> List[tuple]:
    """(figure index, field, metric, `where`) of every metric a claim's figures read."""
    out = []
    for i, f in enumerate(claim.get("figures") or []):
        out.append((i, "metric", f.get("metric"), f.get("where")))
        times = f.get("times") or {}
        if times.get("metric") is not None:
            out.append((i, "times.metric", times["metric"], times.get("where")))
    return out


def unknown_metric(path: Path, ref: tuple, metrics) -> List[str]:
    """One line if the design a figure reads (its first ok match) has no such metric."""
    i, field, m, _ = ref
    if m is None or m in metrics:
        return []
    names = sorted(metrics)
    return [
        f"{path}: claim.figures[{i}].{field}={m} is not a metric of its designs"
        f"{did_you_mean(str(m), names)} (metrics: {listing(names)})"
    ]


def sweep_files(targets: List[str]) -> Tuple[List[Path], List[str]]:
    """The claim sweep files of user paths (a file, or every *.yaml of a directory) and the
    problems (missing paths, files without a valid claim block)."""
    files, e = [], []
    for t in targets:
        p = Path(t).expanduser()
        found = sorted(p.glob("*.yaml")) if p.is_dir() else [p] if p.is_file() else []
        if not found:
            e.append(f"{t}: no such sweep file, nor a directory of *.yaml sweep files")
        for f in found:
            try:
                claim, _ = load_sweep(f)
            except Exception as ex:  # a YAML or sweep syntax problem: one line, never a traceback
                e.append(f"{f}: not a claim sweep ({type(ex).__name__}: {str(ex).splitlines()[0]})")
                continue
            e += check_claim(claim, f)
            files.append(f)
    return files, e


def figure_value(fig: dict, jobs: List[Dict[str, str]], results: List[dict]) -> Optional[float]:
    """Compute one figure from the sweep's jobs and results (None if no job qualifies)."""
    metric = fig["metric"]
    pool = [(j, r) for j, r in zip(jobs, results) if _matches(j, fig.get("where"))]
    ratio = fig.get("ratio")
    values = []
    if ratio:
        if "key" in ratio:
            num, den = {ratio["key"]: ratio["num"]}, {ratio["key"]: ratio["den"]}
        else:
            num, den = ratio["num"], ratio["den"]
        varied = set(num) | set(den)
        rest = lambda j: tuple(sorted((k, v) for k, v in j.items() if k not in varied))  # noqa: E731
        dens = {rest(j): r for j, r in pool if _matches(j, den)}
        for j, r in pool:
            d = dens.get(rest(j))
            if _matches(j, num) and d and r["status"] == "ok" and d["status"] == "ok":
                values.append(r["metrics"][metric] / d["metrics"][metric])
    else:
        values = [r["metrics"][metric] for j, r in pool if r["status"] == "ok"]
    if not values:
        return None
    value = REDUCERS[fig.get("reduce", "mean")](values)
    times = fig.get("times")
    if times:
        factors = [
            r["metrics"][times["metric"]]
            for j, r in zip(jobs, results)
            if _matches(j, times.get("where")) and r["status"] == "ok"
        ]
        if not factors:
            return None
        value *= sum(factors) / len(factors)
    return value


def judge(fig: dict, value: Optional[float]) -> Tuple[str, bool, Optional[float]]:
    pub = fig["published"]
    if value is None:
        return str(pub), False, None
    if isinstance(pub, (list, tuple)):
        lo, hi = float(pub[0]), float(pub[1])
        return f"{lo:g}-{hi:g}", lo <= value <= hi, None
    tol = float(fig.get("tolerance", 0.15))
    r = value / float(pub)
    return f"{float(pub):g}", abs(r - 1.0) <= tol, r


def _job_label(job: Dict[str, str], varied: List[str]) -> str:
    return " ".join(f"{k.split('.')[-1].split('@')[0]}={job[k]}" for k in varied) or "job"


def key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_what_if(job: Dict[str, str], what_if: List[str]) -> List[str]:
    """A job's overrides with the what-if overrides applied last, replacing the job's own value of
    any key they set."""
    keys = {key_of(w) for w in what_if}
    return [f"{k}={v}" for k, v in job.items() if key_of(k) not in keys] + list(what_if)


def mark_calibrations(rows: List[dict]) -> List[dict]:
    """Set `calibration` (the parameter's name, or None) and `fid` (ID:N) on shipped claim rows: a
    figure a parameter was calibrated on (data/calibration.yaml) is not a test of the model."""
    cal = calibration_figures(load_params())
    count: Dict[str, int] = {}
    for r in rows:
        count[r["id"]] = count.get(r["id"], 0) + 1
        r["fid"] = f"{r['id']}:{count[r['id']]}"
        r["calibration"] = None if r["user"] else cal.get(r["fid"])
    return rows


def run_claims(
    ids: Optional[List[str]] = None,
    sweeps_dir: Path = SWEEPS_DIR,
    plots_dir: Optional[Path] = None,
    what_if: Optional[List[str]] = None,
    files: Optional[List[Path]] = None,
    progress: bool = False,
) -> List[dict]:
    """Evaluate every claim sweep (or those whose id is in `ids`). Returns one row per figure.
    With `plots_dir`, also writes one time-breakdown plot per sweep (a bar per job, stacked by
    cause: the Dataflow paper's Fig. 15 style) as `<sweep>.png`. `what_if`: overrides applied to
    every job (see the module docstring). `files`: a user's claim sweeps instead of `sweeps_dir`'s
    (their rows say user=True). `progress`: a progress bar (rate, ETA) on stderr."""
    rows = []
    user = files is not None
    with C.context(), progress_bar(progress) as bar:
        # one base composition per choice of config groups, field overrides applied to a copy
        # (config.plan.Composer, as the fast sweep path): much cheaper than composing every job
        composer = SP.context_composer()
        todo = [(path, *load_sweep(path)) for path in (files if user else sorted(sweeps_dir.glob("*.yaml")))]
        todo = [t for t in todo if not ids or t[1]["id"] in ids]
        task = bar.add_task("claim designs", total=sum(len(jobs) for _, _, jobs in todo))

        def run_job(job):
            cfg = compose_job(composer, with_what_if(job, what_if or []))
            bar.advance(task)
            return evaluate(cfg, keep_steps=False)

        done = {}  # each sweep up to the first ok design each figure reads: its metrics checked
        for path, claim, jobs in todo:
            done[path], pending, e = [], metric_refs(claim), []
            for job in jobs:
                if not pending:
                    break
                r = run_job(job)
                done[path].append(r)
                if r["status"] == "ok":
                    e += [
                        x
                        for ref in pending
                        if _matches(job, ref[3])
                        for x in unknown_metric(path, ref, r["metrics"])
                    ]
                    pending = [ref for ref in pending if not _matches(job, ref[3])]
            if e:
                raise ConfigError("\n".join(e))
        for path, claim, jobs in todo:
            results = done[path] + [run_job(job) for job in jobs[len(done[path]) :]]
            if plots_dir is not None:
                _plot_sweep(path.stem, claim["id"], jobs, results, plots_dir)
            failed = sorted({f"{r['status']}: {r['reason']}" for r in results if r["status"] != "ok"})
            rows += [
                figure_row(claim, path, fig, figure_value(fig, jobs, results), failed, user)
                for fig in claim["figures"]
            ]
    return mark_calibrations(rows)


def figure_row(
    claim: dict, path: Path, fig: dict, value: Optional[float], failed: List[str], user: bool
) -> dict:
    """One row of the claims table: a figure's published and simulated values, its ratio and
    tolerance (None for a published range), whether it passes, and why it has no value."""
    pub, ok, ratio = judge(fig, value)
    ranged = isinstance(fig["published"], (list, tuple))
    return {
        "id": claim["id"],
        "sweep": path.stem,
        "figure": fig["name"],
        "published": pub,
        "simulated": value,
        "ratio": ratio,
        "tolerance": None if ranged else float(fig.get("tolerance", 0.15)),
        "pass": ok,
        "metric": fig["metric"],
        "why_none": failed if value is None else [],
        "user": user,
    }


def _plot_sweep(stem: str, cid: str, jobs, results, plots_dir: Path) -> None:
    varied = [k for k in jobs[0] if len({j[k] for j in jobs}) > 1]
    ok = [(j, r) for j, r in zip(jobs, results) if r["status"] == "ok" and "tpot_memory_ms" in r["metrics"]]
    if ok:
        plots_dir.mkdir(parents=True, exist_ok=True)
        breakdown_plot(
            [r["metrics"] for _, r in ok],
            [_job_label(j, varied) for j, _ in ok],
            plots_dir / f"{stem}.png",
            title=f"{cid}: time per output token",
        )
