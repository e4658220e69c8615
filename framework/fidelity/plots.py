"""Fidelity figures: a depth x length heatmap of passkey accuracy per policy (one panel per budget),
and accuracy against memory saved for every policy and budget."""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmaps(df, out_dir: Path) -> List[Path]:
    """One PNG per policy: panels per budget, rows = needle depth, columns = prompt length, cell =
    passkey exact-match accuracy (mean over seeds)."""
    plt = _plt()
    pk = df[df.task == "passkey"]
    files = []
    for policy, d in pk.groupby("policy", sort=False):
        budgets = sorted(d.budget.unique())
        fig, axes = plt.subplots(1, len(budgets), figsize=(3.2 * len(budgets) + 0.8, 3.2), squeeze=False)
        for k, (ax, b) in enumerate(zip(axes[0], budgets)):
            t = d[d.budget == b].pivot_table(index="depth", columns="length", values="exact", aggfunc="mean")
            im = ax.imshow(t.values, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
            ax.set_xticks(range(len(t.columns)), [str(int(c)) for c in t.columns])
            ax.set_yticks(range(len(t.index)), [f"{x:g}" for x in t.index])
            for i in range(t.shape[0]):
                for j in range(t.shape[1]):
                    ax.text(
                        j,
                        i,
                        f"{t.values[i, j]:.2f}".rstrip("0").rstrip("."),
                        ha="center",
                        va="center",
                        fontsize=8,
                    )
            ax.set_xlabel("prompt tokens")
            if k == 0:
                ax.set_ylabel("needle depth")
            ax.set_title(f"{policy}" + (f" @ {b}" if b else ""))
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="passkey accuracy")
        p = Path(out_dir) / f"heatmap_{policy}.png"
        fig.savefig(p, dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append(p)
    return files


def tradeoff(summary, out_dir: Path) -> Path:
    """Accuracy (passkey; next-token agreement with the full cache when the text task ran) against
    memory saved, a line per policy through its budgets."""
    plt = _plt()
    panels = [c for c in ("passkey_acc", "agreement") if c in summary]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False)
    names = {"passkey_acc": "passkey accuracy", "agreement": "next-token agreement with full cache"}
    saved_col = {"passkey_acc": "memory_saved", "agreement": "text_memory_saved"}
    markers = "osD^v<>px*"
    for ax, col in zip(axes[0], panels):
        for i, (policy, d) in enumerate(summary.groupby("policy", sort=False)):
            d = d.sort_values("budget")
            x = 100.0 * d[saved_col[col] if saved_col[col] in d else "memory_saved"].to_numpy()
            y = d[col].to_numpy()
            ax.plot(x, y, marker=markers[i % len(markers)], label=policy)
            for xi, yi, b in zip(x, y, d.budget):
                if b:
                    ax.annotate(str(b), (xi, yi), textcoords="offset points", xytext=(3, 3), fontsize=7)
        ax.set_xlabel("KV memory saved vs full cache (%)")
        ax.set_ylabel(names[col])
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SmolLM2-135M: accuracy vs KV memory saved (labels: budget, tokens per KV head)", fontsize=9)
    p = Path(out_dir) / "tradeoff.png"
    fig.savefig(p, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return p


def per_head_plot(per_head: dict, out_dir: Path, column: int = 0, name: str = "recall") -> Path:
    """Layer x head map of one proxy metric (attention-mass recall by default) per variant."""
    plt = _plt()
    labels = [k for k in per_head if k != "full"]
    n = max(1, len(labels))
    cols = min(n, 6)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(1.9 * cols + 1, 3.2 * rows), squeeze=False, constrained_layout=True
    )
    for ax in axes.ravel():
        ax.axis("off")
    for ax, lab in zip(axes.ravel(), labels):
        a = np.mean(per_head[lab], axis=0)[..., column]
        im = ax.imshow(a, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.axis("on")
        ax.set_title(lab, fontsize=8)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    if labels:  # only the full cache in the grid: an empty figure
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label=name)
    p = Path(out_dir) / f"per_head_{name}.png"
    fig.savefig(p, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return p
