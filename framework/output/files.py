"""Result files (JSON, per-step CSV, breakdown plot) and the terminal table of one run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from decodelab.output.serving import write_serving
from decodelab.output.serving import cost_rows, print_serving
from decodelab.kernel_layout import CAUSES, Step

COLORS = {
    "memory": "#4c72b0",
    "compute": "#dd8452",
    "launch_sync": "#c44e52",
    "fill_drain": "#8172b3",
    "host": "#937860",
    "collectives": "#55a868",
    "excess": "#bbbbbb",
}


def steps_table(res: Dict[str, Any]):
    import pandas as pd

    steps, times = res["steps"], res["times"]
    df = pd.DataFrame(times * 1e3, columns=[f"{c}_ms" for c in CAUSES])
    df.insert(0, "phase", ["prefill"] + ["decode"] * (len(df) - 1))
    df.insert(1, "query_tokens", steps[:, Step.QTOK].astype(int))
    df.insert(2, "context", steps[:, Step.CTX].astype(int))
    df.insert(3, "sequences", steps[:, Step.SEQS].astype(int))
    df.insert(4, "sampled_per_seq", steps[:, Step.OUT].astype(int))
    df["total_ms"] = times.sum(axis=1) * 1e3
    return df


def write_steps_csv(res: Dict[str, Any], path: Path) -> Path:
    """steps_table(res) as CSV (%.6g floats), written without pandas: importing pandas was a
    fifth of the start-up time of a single run."""
    steps, times = res["steps"], res["times"] * 1e3
    cols = (
        ["phase", "query_tokens", "context", "sequences", "sampled_per_seq"]
        + [f"{c}_ms" for c in CAUSES]
        + ["total_ms"]
    )
    ints = steps[:, [Step.QTOK, Step.CTX, Step.SEQS, Step.OUT]].astype(int)
    total = times.sum(axis=1)
    lines = [",".join(cols)]
    for i in range(len(times)):
        lines.append(
            ",".join(
                [
                    "prefill" if i == 0 else "decode",
                    *map(str, ints[i]),
                    *("%.6g" % v for v in times[i]),
                    "%.6g" % total[i],
                ]
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def breakdown_plot(metrics_list, labels, path: Path, title: str = "Time per output token") -> Path:
    """Stacked bars of TPOT by cause (the Dataflow paper's Fig. 15 style), one bar per result.
    Horizontal bars, the labels on the y axis: a long run label or 72 jobs of a claim sweep stay
    legible, the figure grows in height (0.28 in per bar) and never in width; saved with a tight
    bounding box so no label is clipped."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, faster start

    n = len(labels)
    fig = Figure(figsize=(8.0, 1.6 + 0.28 * n))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    y = np.arange(n)[::-1]  # the first result on top
    left = np.zeros(n)
    for cause in CAUSES:
        vals = np.array([m.get(f"tpot_{cause}_ms", 0.0) for m in metrics_list])
        ax.barh(y, vals, left=left, height=0.7, label=cause, color=COLORS[cause])
        left += vals
    for yi, xi, m in zip(y, left, metrics_list):
        if "pct_roofline" in m:
            ax.text(xi, yi, f" {m['pct_roofline']:.0f}%", ha="left", va="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=7 if n > 8 else 8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(0, max(left.max(), 1e-9) * 1.12)  # room for the % labels
    ax.set_xlabel("ms per decode step (TPOT)")
    ax.set_title(f"{title} (bar label: % of roofline, Eq. 3)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a full disk or
    a killed process leaves the old file or none, never an empty or truncated one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_outputs(
    cfg_dict, res, out_dir: Path, label: str, plots: bool = True, step_csv: bool = True, key=None
) -> Dict[str, str]:
    """Write result.json (always), steps.csv and breakdown.png (ok results) into out_dir.
    `key`: the design's config_hash, where the caller has it already."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    path = out_dir / "result.json"
    write_atomic(path, json.dumps(res.record(cfg_dict, key), indent=1, default=float))
    files["result"] = str(path)
    if res["status"] == "ok":
        if step_csv and "times" in res:
            p = out_dir / "steps.csv"
            write_steps_csv(res, p)
            files["steps"] = str(p)
        if plots:
            files["plot"] = str(breakdown_plot([res["metrics"]], [label], out_dir / "breakdown.png"))
        if "serving" in res:  # serving run: requests.csv, timeline, latency plots
            files.update(write_serving(res, out_dir, label, plots, step_csv))
    return files


def print_result(label: str, res: Dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if res["status"] != "ok":
        console.print(f"[bold]{label}[/bold]: [red]{res['status']}[/red]: {res['reason']}")
        return
    if "serving" in res:
        return print_serving(label, res)
    m = res["metrics"]
    t = Table(title=label, show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = []
    if "coe_latency_ms" in m:  # Composition of Experts: the batch's latency is the headline
        rows += [
            ("CoE latency per batch", f"{m['coe_latency_ms']:.1f} ms"),
            (
                "  routing / switching / execution",
                "{:.1f} / {:.1f} / {:.1f} ms".format(
                    m["coe_routing_ms"], m["coe_switching_ms"], m["coe_execution_ms"]
                ),
            ),
            ("CoE latency per prompt", f"{m['coe_latency_per_prompt_ms']:.2f} ms"),
            ("one (prompt, expert) run:", ""),
        ]
    rows += [
        ("TTFT", f"{m['ttft_ms']:.2f} ms"),
        ("TPOT", f"{m['tpot_ms']:.3f} ms"),
        ("tokens/s per user", f"{m['tok_s_user']:.1f}"),
        ("tokens/s aggregate", f"{m['tok_s_aggregate']:.1f}"),
        ("% of roofline (Eq. 3)", f"{m['pct_roofline']:.1f} %"),
        ("kernel calls per step", f"{m['n_kernel_calls_per_step']:.0f}"),
    ]
    if "pp_bubble_pct" in m:  # pipeline stages (docs/model.md, "Parallelism beyond tensor parallelism")
        rows.append(
            (
                f"pipeline idle: TPOT / TTFT ({m['pp_microbatches']:.0f} micro-batches)",
                f"{m['pp_bubble_pct']:.1f} % / {m['ttft_pp_bubble_pct']:.1f} %",
            )
        )
    rows += cost_rows(m)
    for key in sorted(k for k in m if k.startswith("mem_") and k.endswith("_gib")):
        tier = key[4:-4]
        rows.append((f"memory {tier} per chip", f"{m[key]:.2f} GiB ({m[f'mem_{tier}_pct']:.0f} %)"))
    for cause in CAUSES:
        v = m[f"tpot_{cause}_ms"]
        rows.append((f"  TPOT {cause}", f"{v:.3f} ms ({100 * v / m['tpot_ms']:.0f} %)"))
    for r in rows:
        t.add_row(*r)
    console.print(t)
    for line in LEGEND:
        console.print(line, highlight=False)
    for n in dict.fromkeys(res["notes"]):  # each note once
        console.print(f"note: {n}")


# Under every metric table: the two rows a newcomer cannot read off (docs/model.md, "% of roofline" and
# "Time of one call and one step").
LEGEND = (
    "% of roofline (Eq. 3): tok/s / HBM bound (weights + KV bytes per step)",
    "TPOT excess: kernel time above its roofline (below-peak efficiency)",
)


def where_lines(out_dir: Path, tracking, run_id: Optional[str] = None, table: Optional[Path] = None) -> list:
    """Where a run's or a sweep's results went: its directory (or results table), and the MLflow
    store, experiment and (sweep parent) run with how to open them. `tracking`: a config node
    or a dict."""
    lines = [f"results: {table or out_dir}"]
    if tracking is not None and tracking.get("enabled", False):
        uri, exp = str(tracking.get("uri")), tracking.get("experiment", "decodelab")
        view = uri if uri.startswith("http") else f"mlflow ui --backend-store-uri {uri}"
        lines.append(f"MLflow:  {uri}, experiment '{exp}'" + (f", run {run_id}" if run_id else ""))
        lines.append(f"view:    {view} (the experiment's Runs tab)")
    return lines
