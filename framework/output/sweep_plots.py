"""Plots of a whole sweep from its results table: the Pareto front (per-user speed against
aggregate throughput, every feasible design, the front highlighted) and a metric against each
swept numeric parameter. Matplotlib without pyplot (no GUI backend)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence

import numpy as np


def _figure(w: float = 6.0, h: float = 4.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    return fig


def pareto_plot(
    x: Sequence[float],
    y: Sequence[float],
    front: Sequence[bool],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str,
) -> Path:
    """All points grey, the front's points joined in red."""
    x, y, front = np.asarray(x, float), np.asarray(y, float), np.asarray(front, bool)
    fig = _figure()
    ax = fig.add_subplot()
    ax.scatter(x, y, s=6, c="#999999", alpha=0.5, label=f"feasible designs ({len(x)})")
    order = np.argsort(x[front])
    ax.plot(x[front][order], y[front][order], "o-", c="#c44e52", ms=4, label=f"Pareto front ({front.sum()})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def metric_vs_param(df, param: str, metric: str, path: Path, title: str) -> Path:
    """`metric` against `param` over the ok rows of a results table: each point a design, the
    best design at each parameter value joined."""
    ok = df[(df["status"] == "ok") & df[metric].notna() & df[param].notna()]
    fig = _figure()
    ax = fig.add_subplot()
    ax.scatter(ok[param], ok[metric], s=6, c="#4c72b0", alpha=0.4, label="designs")
    best = ok.groupby(param)[metric].max().sort_index()
    ax.plot(best.index, best.values, "-", c="#dd8452", label="best at each value")
    if len(best) > 2 and best.index.min() > 0 and best.index.max() / best.index.min() >= 50:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(param)
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def numeric_params(df, varied: List[str]) -> List[str]:
    """The swept keys that are numeric columns of the table (plain field overrides)."""
    out = []
    for k in varied:
        col = k.lstrip("+~")
        if col in df.columns and df[col].dtype.kind in "if" and df[col].nunique() > 1:
            out.append(col)
    return out
