"""The largest request rate each design sustains under TTFT / TPOT (/ end-to-end) SLOs, its goodput
per chip, and the best designs: every design of a sweep (a sweep file and/or overrides with
sweeps, as `decodelab sweep`), or an Optuna search over a search space file (`decodelab search`'s
format; its `slo:` block, overridden by the flags). Designs are open-loop serving workloads; the
search varies workload.arrival_rate (requests/s per replica, starting from the workload's).

  decodelab slo model=llama3_2_1b,llama3_1_8b hardware=h100_sxm workload=open_loop --ttft-ms 2000 --tpot-ms 50
  decodelab slo model=llama3_1_8b workload=open_loop hardware=dgx_h100 hardware.tensor_parallel=1,2,4,8 \
      --ttft-ms 300 --tpot-ms 15 -j 2                                # TP layouts of one DGX H100
  decodelab slo sweeps/search/slo_llama8b.yaml --trials 40          # Optuna over a space file

Output: results.parquet (every design: max_rate_rps, goodput_tok_s_per_chip, tok_s_per_user,
slo_binding, the serving metrics at the max rate; infeasible designs with their reason), the
Pareto front of tok/s per user against goodput per chip (slo_pareto.png), one MLflow parent run
with both (the front's designs as child runs). docs/capacity.md."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import yaml

from decodelab.apps.common import add_max_designs, errors, is_override, narrow_table, run_module, workers
from decodelab.config.plan import make_plan
from decodelab.config.sweepfile import SweepError
from decodelab.paths import SWEEPS_DIR
from decodelab.runs.backends import BACKENDS, BackendError
from decodelab.runs.slo import PCTS, SLO, SloError
from decodelab.runs.slo_sweep import RANK, SloOutcome, check_workload, run_slo_sweep

FLAGS = {"ttft_ms": "--ttft-ms", "tpot_ms": "--tpot-ms", "e2e_ms": "--e2e-ms", "pct": "--pct", "tol": "--tol"}


def add_arguments(ap) -> None:
    ap.add_argument(
        "args", nargs="*", metavar="[TARGET] OVERRIDE", help="sweep file/name or search space, then overrides"
    )
    ap.add_argument("--ttft-ms", type=float, help="p<pct> time to first token bound (ms)")
    ap.add_argument("--tpot-ms", type=float, help="p<pct> time per output token bound (ms)")
    ap.add_argument("--e2e-ms", type=float, help="p<pct> end-to-end latency bound (ms), optional")
    ap.add_argument(
        "--pct", type=int, help=f"percentile of the SLOs: one of {', '.join(map(str, PCTS))} (default 90)"
    )
    ap.add_argument("--tol", type=float, help="relative width of the final rate bracket (default 0.02)")
    ap.add_argument(
        "-j", "--jobs", type=workers, default=1, help="worker processes (default 1: this process)"
    )
    ap.add_argument(
        "--backend", choices=BACKENDS, default="local", help="local processes (-j) or a Dask cluster"
    )
    ap.add_argument("--address", help="with --backend dask: the scheduler (tcp://host:8786)")
    ap.add_argument("--trials", type=workers, help="search space only: Optuna trials (default: the space's)")
    ap.add_argument("--top", type=int, default=10, help="designs in the summary table")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_max_designs(ap)


def space_file(target: Optional[str]) -> Optional[Path]:
    """The search space `target` names (a YAML mapping with `params`, not a Hydra sweep file)."""
    if not target:
        return None
    for p in (Path(target), SWEEPS_DIR / "search" / target, SWEEPS_DIR / "search" / f"{target}.yaml"):
        if p.is_file() and p.suffix in (".yaml", ".yml"):
            try:
                d = yaml.safe_load(p.read_text())
            except yaml.YAMLError:
                return None
            return p if isinstance(d, dict) and "params" in d and "hydra" not in d else None
    return None


def slo_from(a, base: Optional[dict] = None) -> SLO:
    given = {k: getattr(a, k) for k in FLAGS if getattr(a, k) is not None}
    d = {**(base or {}), **given}
    return SLO.from_dict(
        d, flag=lambda k: FLAGS[k] if k in FLAGS and (k in given or not base) else f"slo.{k}"
    )


def run(a) -> int:
    first = a.args[0] if a.args else None
    target, overrides = (first, a.args[1:]) if first and not is_override(first) else (None, a.args)
    if a.address and a.backend != "dask":
        return errors("--address needs --backend dask")
    space = space_file(target)
    if space is not None:
        from decodelab.apps.search import run_space

        return run_space(str(space), overrides, a, slo_from)
    if a.trials:
        return errors("--trials: only for a search space file (sweeps/search/*.yaml with params:)")
    try:
        slo = slo_from(a)
        plan = make_plan(target, overrides, a.max_designs)
        check_workload(plan.base_cfg)
    except (SloError, SweepError) as e:
        return errors(str(e))
    try:
        out = run_slo_sweep(
            plan, slo, jobs=a.jobs, progress=not a.quiet, backend=a.backend, address=a.address
        )
    except BackendError as e:
        return errors(str(e))
    print_summary(plan.name, plan.varied, slo, out, a.top)
    return 0


def print_summary(name: str, varied: List[str], slo: SLO, out: SloOutcome, top: int) -> None:
    from rich.console import Console

    console = Console()
    limits = ", ".join(f"p{slo.pct} {k.upper()} <= {v:g} ms" for k, v in slo.limits().items())
    console.print(
        f"[bold]slo {name}[/bold] ({limits}; rate bracket {100 * slo.tol:g}%): {len(out.records)} designs "
        f"in {out.seconds:.1f} s ({out.backend}) -> {out.sweep_dir}"
    )
    console.print("  " + ", ".join(f"{k} {v}" for k, v in out.counts().items() if v or k == "ok"))
    rows = out.best(top)
    front = {out.records[i]["index"] for i in out.front}
    if rows:
        cols = [
            ("max_rate_rps", "max req/s", ".3g"),
            ("goodput_tok_s_per_chip", "goodput tok/s/chip", ".0f"),
            ("tok_s_per_user", "tok/s/user", ".1f"),
            (f"ttft_p{slo.pct}_ms", f"p{slo.pct} TTFT ms", ".0f"),
            (f"tpot_p{slo.pct}_ms", f"p{slo.pct} TPOT ms", ".1f"),
        ]
        names = [
            "job",
            *[k.split("@")[0].rsplit(".", 1)[-1] for k in varied],
            *[c[1] for c in cols],
            "binding",
            "front",
        ]
        texts = []
        for r in rows:
            job = dict(o.partition("=")[::2] for o in r["overrides"])
            m = r["metrics"]
            texts.append(
                [str(r["index"]), *[job.get(k, "") for k in varied]]
                + [format(m.get(k, float("nan")), f) for k, _, f in cols]
                + [r["slo_binding"], "*" if r["index"] in front else ""]
            )
        numeric = [True] + [False] * len(varied) + [True] * len(cols) + [False, False]
        console.print(narrow_table(f"top {len(rows)} by goodput per chip ({RANK})", names, texts, numeric))
        b = rows[0]
        console.print(
            f"  best by goodput per chip: job {b['index']} ({' '.join(b['overrides']) or b['name']}): "
            f"{b['metrics']['max_rate_rps']:.3g} req/s, {b['metrics'].get(RANK, float('nan')):.0f} tok/s per chip"
        )
    for status in ("infeasible", "invalid", "error"):
        reasons = {}
        for r in out.records:
            if r["status"] == status:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda x: -x[1])[:3]:
            console.print(f"  {status} x{n}: {reason}")
    console.print(f"  table: {out.table}; plot: {out.plot}")
    if out.parent and not out.tracker_error:
        console.print(
            f"  MLflow: parent run {out.parent} with the table and plot; {len(out.front)} front designs as child runs"
        )
    elif out.tracker_error:
        console.print(
            f"[yellow]warning[/yellow]: not logged to MLflow ({out.tracker_error}); files in {out.sweep_dir}"
        )


def main(argv: List[str]) -> int:
    return run_module("slo", sys.modules[__name__], argv)
