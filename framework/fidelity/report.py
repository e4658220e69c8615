"""Files and table of a fidelity grid (its MLflow runs: decodelab.tracking.fidelity; the command:
decodelab.apps.fidelity)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np

from decodelab.fidelity import plots
from decodelab.fidelity.run import Results

LAYER_HEAD_COLUMNS = ("recall", "relerr", "read_tokens", "needle_read", "needle_kept")


def write_files(res: Results, summ, out_dir: Path) -> List[Path]:
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(res.rows)
    files = [out_dir / "results.csv", out_dir / "summary.csv", out_dir / "per_layer_head.csv"]
    df.to_csv(files[0], index=False)
    summ.to_csv(files[1], index=False)
    recs = []
    for label, arrs in res.per_head.items():
        a = np.mean(arrs, axis=0)  # [L, H, 5]
        for l in range(a.shape[0]):
            for h in range(a.shape[1]):
                recs.append(
                    {
                        "label": label,
                        "layer": l,
                        "head": h,
                        **{c: float(a[l, h, i]) for i, c in enumerate(LAYER_HEAD_COLUMNS)},
                    }
                )
    pd.DataFrame(recs).to_csv(files[2], index=False)
    if (df.task == "passkey").any():
        files += plots.heatmaps(df, out_dir)
        files.append(plots.per_head_plot(res.per_head, out_dir))
    files.append(plots.tradeoff(summ, out_dir))
    return files


def metric_rows(summ, df) -> dict:
    """label -> {fidelity_* metric: value}."""
    out = {}
    for _, r in summ.iterrows():
        m = {
            f"fidelity_{k}": float(r[k])
            for k in r.index
            if k not in ("label", "policy", "budget") and r[k] == r[k]
        }
        pk = df[(df.task == "passkey") & (df.label == r["label"])]
        for L, g in pk.groupby("length"):
            m[f"fidelity_passkey_acc_len{int(L)}"] = float(g.exact.mean())
        for d, g in pk.groupby("depth"):
            m[f"fidelity_passkey_acc_depth{int(round(100 * d))}"] = float(g.exact.mean())
        out[r["label"]] = m
    return out


def print_summary(summ, res: Results, cfg) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"decodelab fidelity ({cfg.name}): SmolLM2-135M, accuracy vs KV memory")
    cols = [
        ("label", "policy@budget", "{}"),
        ("memory_saved", "mem saved", "{:.0%}"),
        ("passkey_acc", "passkey", "{:.2f}"),
        ("passkey_digits", "digits", "{:.2f}"),
        ("needle_kept", "needle kept", "{:.2f}"),
        ("recall", "attn recall", "{:.3f}"),
        ("relerr", "out rel err", "{:.3f}"),
        ("agreement", "next-tok agree", "{:.2f}"),
        ("ppl_ratio", "ppl / full", "{:.3f}"),
    ]
    cols = [c for c in cols if c[0] in summ]
    for _, head, _ in cols:
        t.add_column(head, justify="left" if head == "policy@budget" else "right")
    for _, r in summ.iterrows():
        t.add_row(*[("-" if r[k] != r[k] else fmt.format(r[k])) for k, _, fmt in cols])
    Console(width=140).print(t)
    Console(width=140).print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()))
