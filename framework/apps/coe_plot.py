"""Composition of Experts: latency per batch against the number of experts for each platform of a
sweep (the SN40L paper's Fig. 12 shape), with the time split of the largest count every platform
serves (Fig. 1 shape); a table and a PNG.

  decodelab coe-plot                                   sweeps/c12_latency_vs_experts.yaml
  decodelab coe-plot my_sweep.yaml --out coe.png"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Dict, List

from decodelab.config import compose as C
from decodelab.config.sweepfile import sweep_jobs
from decodelab.modes.dispatch import evaluate
from decodelab.paths import SWEEPS_DIR
from decodelab.apps.common import errors, run_module

DEFAULT_PLOT_SWEEP = "c12_latency_vs_experts.yaml"


# --- latency vs number of experts (SN40L paper Fig. 12 / Fig. 1 shape) ---


def sweep_results(path: Path) -> List[Dict[str, Any]]:
    """Evaluate every job of a sweep file (claims format); one row per job."""
    rows = []
    with C.context():
        for job in sweep_jobs(path):
            cfg = C.compose_in_context([f"{k}={v}" for k, v in job.items()])
            r = evaluate(cfg, keep_steps=False)
            rows.append(
                {
                    "hardware": cfg.hardware.name,
                    "n_experts": cfg.coe.n_experts,
                    "status": r["status"],
                    "reason": r["reason"],
                    **r["metrics"],
                }
            )
    return rows


def plot_latency(rows: List[Dict[str, Any]], path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    platforms = list(dict.fromkeys(r["hardware"] for r in rows))
    for hw in platforms:
        ok = sorted(
            (r for r in rows if r["hardware"] == hw and r["status"] == "ok"), key=lambda r: r["n_experts"]
        )
        oom = [r["n_experts"] for r in rows if r["hardware"] == hw and r["status"] == "infeasible"]
        (line,) = ax.plot(
            [r["n_experts"] for r in ok], [r["coe_latency_ms"] / 1e3 for r in ok], marker="o", ms=3, label=hw
        )
        if oom and ok:
            ax.plot(
                [min(oom)],
                [ok[-1]["coe_latency_ms"] / 1e3],
                marker="x",
                ms=9,
                color=line.get_color(),
                linestyle="none",
            )
            ax.annotate(
                "OOM",
                (min(oom), ok[-1]["coe_latency_ms"] / 1e3),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_xlabel("experts")
    ax.set_ylabel("latency per batch (s)")
    ax.set_title("latency vs experts (x: out of memory)", fontsize=10)
    ax.legend(fontsize=8)
    served = [
        min(r["n_experts"] for r in rows if r["hardware"] == hw and r["status"] != "ok")
        if any(r["hardware"] == hw and r["status"] != "ok" for r in rows)
        else math.inf
        for hw in platforms
    ]
    cap = max(
        (r["n_experts"] for r in rows if r["status"] == "ok" and r["n_experts"] < min(served)), default=None
    )
    at = [next((r for r in rows if r["hardware"] == hw and r["n_experts"] == cap), None) for hw in platforms]
    bottom = [0.0] * len(platforms)
    for part, color in (("routing", "#937860"), ("switching", "#c44e52"), ("execution", "#4c72b0")):
        vals = [r[f"coe_{part}_ms"] / 1e3 if r and r["status"] == "ok" else 0.0 for r in at]
        bx.bar(platforms, vals, bottom=bottom, label=part, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    bx.set_title(f"split at {cap} experts", fontsize=10)
    bx.set_ylabel("s per batch")
    bx.tick_params(axis="x", labelsize=7)
    bx.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(p) -> None:
    p.add_argument(
        "sweep",
        nargs="?",
        default=str(SWEEPS_DIR / DEFAULT_PLOT_SWEEP),
        help=f"sweep file (default: sweeps/{DEFAULT_PLOT_SWEEP})",
    )
    p.add_argument("--out", help="PNG written (default: outputs/coe/<sweep>.png)")


def run(a) -> int:
    from rich.console import Console
    from rich.table import Table

    sweep = Path(a.sweep)
    if not sweep.is_file():
        return errors(f"sweep {a.sweep}: no such file")
    try:
        rows = sweep_results(sweep)
    except C.hydra_errors() as e:
        return errors(f"{sweep}: {str(e).strip().splitlines()[0]}")
    t = Table(title=f"CoE latency per batch ({sweep.name})")
    for col in ("hardware", "experts", "status", "latency ms", "routing", "switching", "execution"):
        t.add_column(col, justify="left" if col in ("hardware", "status") else "right")
    for r in rows:
        ok = r["status"] == "ok"
        t.add_row(
            r["hardware"],
            str(r["n_experts"]),
            r["status"],
            *(
                [
                    f"{r[k]:.0f}"
                    for k in ("coe_latency_ms", "coe_routing_ms", "coe_switching_ms", "coe_execution_ms")
                ]
                if ok
                else ["-"] * 4
            ),
        )
    Console().print(t)
    out = Path(a.out or f"outputs/coe/{sweep.stem}.png")
    print(f"plot: {plot_latency(rows, out, title=sweep.stem)}")
    return 0


def main(argv: List[str]) -> int:
    return run_module("coe-plot", sys.modules[__name__], argv)
