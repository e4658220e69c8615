"""`decodelab claims [ID ...] [--no-track | tracking=off | tracking.KEY=VALUE] [KEY=VALUE ...]`: run
every claim sweep under `sweeps/` in-process and compare the simulated figures with the published ones.

Any other `KEY=VALUE` (Hydra override syntax, `++key=value` to add a key some jobs lack) is a what-if:
it is applied to every job of the selected sweeps, after and in place of the sweep's own value for
that key, e.g. `decodelab claims C6 C7 ++speculative.acceptance=0.95` or
`decodelab claims C9 hardware.fill_drain_us=10`. The table and the MLflow run say which overrides
were applied (an MLflow `what_if` tag and run name `claims what-if`), so a what-if is never mistaken for the canonical table.

A claim sweep is an ordinary Hydra config (runnable on its own with
`decodelab -m --config-dir sweeps --config-name <file>`): its `hydra.sweeper.params` list the
jobs, and its `claim:` block says which figures to compute from the jobs' metrics:

    claim:
      id: C5
      source: SN40L Table IV
      figures:
        - name: tok/s per user           # one figure per published number
          metric: tok_s_user             # any metric of a result
          where: {optimizations.kernel_looping: "true"}   # jobs whose overrides match
          ratio: {key: hardware, num: sn40l_rack16, den: dgx_h100}  # optional: metric ratio
          # or ratio: {num: {speculative: draft}, den: {speculative: none}}: jobs paired on
          # every other override
          reduce: max                    # mean (default) | geomean | max | min over jobs/pairs
          times: {metric: spec_tokens_per_round, where: {speculative: mtp}}  # optional: the value
          # times the mean of another metric over the jobs `where` matches (a factor the paper applies)
          published: 1042                # a number (pass within tolerance) or [lo, hi]
          tolerance: 0.15
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from omegaconf import OmegaConf

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"
REDUCERS = {
    "mean": lambda v: sum(v) / len(v),
    "geomean": lambda v: math.exp(sum(math.log(x) for x in v) / len(v)),
    "max": max,
    "min": min,
}


def expand(params: Dict[str, str]) -> List[Dict[str, str]]:
    """The jobs of a sweep: the cartesian product of Hydra sweep values (`a,b,c`, `range(...)`,
    `choice(...)`), parsed with Hydra's own override parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    keys, values = [], []
    for o in parsed:
        keys.append(o.get_key_element())
        values.append(list(o.sweep_string_iterator()) if o.is_sweep_override()
                       else [o.get_value_element_as_str()])
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def load_sweep(path: Path) -> Tuple[dict, List[Dict[str, str]]]:
    raw = OmegaConf.load(path)
    params = OmegaConf.to_container(raw.hydra.sweeper.params, resolve=False)
    claim = OmegaConf.to_container(raw.claim, resolve=False)
    return claim, expand({k: str(v) for k, v in params.items()})


def _matches(job: Dict[str, str], where: Optional[dict]) -> bool:
    # Hydra's sweep iterator spells booleans True/False; YAML may say true/false
    return all(str(job.get(k)).lower() == str(v).lower() for k, v in (where or {}).items())


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
        factors = [r["metrics"][times["metric"]] for j, r in zip(jobs, results)
                   if _matches(j, times.get("where")) and r["status"] == "ok"]
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


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_what_if(job: Dict[str, str], what_if: List[str]) -> List[str]:
    """A job's overrides with the what-if overrides applied last, replacing the job's own value of
    any key they set."""
    keys = {_key(w) for w in what_if}
    return [f"{k}={v}" for k, v in job.items() if _key(k) not in keys] + list(what_if)


def run_claims(ids: Optional[List[str]] = None, sweeps_dir: Path = SWEEPS_DIR,
               plots_dir: Optional[Path] = None, what_if: Optional[List[str]] = None) -> List[dict]:
    """Evaluate every claim sweep (or those whose id is in `ids`). Returns one row per figure.
    With `plots_dir`, also writes one time-breakdown plot per sweep (a bar per job, stacked by
    cause: the Dataflow paper's Fig. 15 style) as `<sweep>.png`. `what_if`: overrides applied to
    every job (see the module docstring)."""
    from hydra import compose, initialize_config_dir
    import framework.schema  # noqa: F401
    from framework.app import CONF_DIR
    from framework.evaluate import evaluate
    rows = []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for path in sorted(sweeps_dir.glob("*.yaml")):
            claim, jobs = load_sweep(path)
            if ids and claim["id"] not in ids:
                continue
            results = []
            for job in jobs:
                cfg = compose(config_name="config", overrides=with_what_if(job, what_if or []))
                results.append(evaluate(cfg, keep_steps=False))
            if plots_dir is not None:
                _plot_sweep(path.stem, claim["id"], jobs, results, plots_dir)
            failed = sorted({f"{r['status']}: {r['reason']}" for r in results if r["status"] != "ok"})
            for fig in claim["figures"]:
                value = figure_value(fig, jobs, results)
                pub, ok, ratio = judge(fig, value)
                rows.append({"id": claim["id"], "sweep": path.stem, "figure": fig["name"],
                             "published": pub, "simulated": value, "ratio": ratio, "pass": ok,
                             "metric": fig["metric"], "why_none": failed if value is None else []})
    return rows


def _plot_sweep(stem: str, cid: str, jobs, results, plots_dir: Path) -> None:
    from framework.report import breakdown_plot
    varied = [k for k in jobs[0] if len({j[k] for j in jobs}) > 1]
    ok = [(j, r) for j, r in zip(jobs, results) if r["status"] == "ok" and "tpot_memory_ms" in r["metrics"]]
    if ok:
        plots_dir.mkdir(parents=True, exist_ok=True)
        breakdown_plot([r["metrics"] for _, r in ok], [_job_label(j, varied) for j, _ in ok],
                       plots_dir / f"{stem}.png", title=f"{cid}: time per output token")


def main(argv: List[str]) -> int:
    from rich.console import Console
    from rich.table import Table
    import tempfile
    ids = [a for a in argv if not a.startswith("-") and "=" not in a]
    known = sorted({load_sweep(p)[0]["id"] for p in SWEEPS_DIR.glob("*.yaml")},
                   key=lambda c: (len(c), c))
    unknown = [i for i in ids if i not in known]
    flags = [a for a in argv if a.startswith("-") and a != "--no-track"]
    if unknown or flags:
        print(f"error: {', '.join(unknown + flags)}: give claim ids ({' '.join(known)}), "
              "--no-track, tracking.KEY=VALUE / tracking=off, or KEY=VALUE what-if overrides")
        return 2
    overrides = [a for a in argv if "=" in a and _key(a).split(".")[0] == "tracking"]
    what_if = [a for a in argv if "=" in a and a not in overrides]
    from hydra.errors import HydraException
    try:
        tr = _tracking(overrides)
    except HydraException as e:
        print(f"error: {str(e).strip().splitlines()[0]}")
        return 2
    track = "--no-track" not in argv and tr.enabled
    plots = Path(tempfile.mkdtemp(prefix="decodelab-claims-")) if track else None
    try:
        rows = run_claims(ids or None, plots_dir=plots, what_if=what_if)
    except HydraException as e:     # a misspelled key or a value a job's config rejects
        print(f"error: {' '.join(what_if)}: {str(e).strip().splitlines()[0]}")
        return 2
    title = "decodelab claims (pass: within tolerance, default 15%; ranges: inside)"
    if what_if:
        title += f"\nWHAT-IF, not the canonical table: {' '.join(what_if)}"
    t = Table(title=title)
    for col in ("id", "figure", "published", "simulated", "ratio", "pass"):
        t.add_column(col, justify="right" if col in ("published", "simulated", "ratio") else "left")
    for r in rows:
        t.add_row(r["id"], r["figure"], r["published"],
                  "-" if r["simulated"] is None else f"{r['simulated']:.3g}",
                  "" if r["ratio"] is None else f"{r['ratio']:.2f}",
                  "[green]pass[/green]" if r["pass"] else "[red]FAIL[/red]")
    Console().print(t)
    for cid, why in {r["id"]: r["why_none"] for r in rows if r["why_none"]}.items():
        print(f"{cid}: no figure: " + "; ".join(why))
    if track:
        _log(rows, plots, tr, what_if)
    return 0 if all(r["pass"] for r in rows) else 1


def _tracking(overrides: List[str]):
    """The tracking settings of the default config with `overrides` applied."""
    from hydra import compose, initialize_config_dir
    from framework.app import CONF_DIR
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=overrides).tracking


def _log(rows: List[dict], plots: Optional[Path], tr, what_if: Optional[List[str]] = None) -> None:
    """Log the claims table (and the per-sweep breakdown plots) to MLflow as one run."""
    import tempfile
    import pandas as pd
    from framework import tracking
    try:
        tags = {"kind": "claims", "git_commit": tracking.git_commit()}
        if what_if:
            tags["what_if"] = " ".join(what_if)
        run = tracking.start_run(tr, "claims what-if" if what_if else "claims", tags)
        client = tracking._client(tr.uri)
        for r in rows:
            if r["simulated"] is not None:
                key = f"{r['id']}_{r['figure']}".replace(" ", "_").replace("/", "_per_")
                client.log_metric(run, "".join(c for c in key if c.isalnum() or c in "_-.")[:250],
                                  float(r["simulated"]))
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "claims.csv"
            pd.DataFrame(rows).to_csv(p, index=False)
            client.log_artifact(run, str(p))
        for png in sorted(plots.glob("*.png")) if plots else ():
            client.log_artifact(run, str(png), "breakdown")
        tracking.end_run(tr, run)
    except Exception as e:  # never lose the printed table to a tracker problem
        print(f"warning: claims table not logged to MLflow ({type(e).__name__}: {e})")
