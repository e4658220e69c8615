"""The KV-policy trade-off plot of a sweep's results (`decodelab kvplot DIR [--out FILE.png]`).

Reads every `result.json` under DIR (a multirun directory of sweeps/studies/kv_tradeoff.yaml or
kv_snapstream_params.yaml), writes `kv_tradeoff.csv` (one row per job) and `kv_tradeoff.png`:
one column per context length, rows = max batch that fits, aggregate tok/s and per-user tok/s at
that batch, and the policy's prefill selection as % of TTFT; x = kv_policy.budget, one line per
policy (and per other kv_policy field the sweep varies).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

from decodelab.apps.common import errors, run_module

ROWS = (
    ("max_batch", "max batch that fits"),
    ("tok_s_aggregate", "aggregate tok/s"),
    ("tok_s_user", "tok/s per user"),
    ("kv_select_pct_ttft", "selection, % of TTFT"),
)


class BadResult(ValueError):
    """A result.json that cannot be read (truncated, not a decodelab result)."""


def load(root: Path):
    import pandas as pd

    recs = []
    for p in sorted(root.rglob("result.json")):
        try:
            r = json.loads(p.read_text())
            c = r["config"]
            c["model"]["name"], c["workload"]["prompt_len"], c["kv_policy"].items  # noqa: B018
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadResult(
                f"{p}: not a decodelab result.json ({type(e).__name__}: {e}); re-run that job or remove the file"
            )
        row = {
            "status": r["status"],
            "reason": r["reason"],
            "model": c["model"]["name"],
            "hardware": c["hardware"]["name"],
            "prompt_len": c["workload"]["prompt_len"],
            "output_len": c["workload"]["output_len"],
            "dir": str(p.parent),
        }
        row.update({f"kv_policy.{k}": v for k, v in c["kv_policy"].items() if k != "params"})
        row.update(r.get("metrics", {}))
        recs.append(row)
    df = pd.DataFrame(recs)
    if len(df):
        df["context"] = df["prompt_len"] + df["output_len"]
    return df


def _varied(ok) -> List[str]:
    """kv_policy fields a sweep varies within one policy, beyond what the budget determines."""
    out = []
    for c in ok.columns:
        if not c.startswith("kv_policy.") or c in ("kv_policy.name", "kv_policy.budget"):
            continue
        per = ok.groupby(["kv_policy.name", "kv_policy.budget"])[c].apply(lambda s: s.astype(str).nunique())
        if (per > 1).any():
            out.append(c)
    return out


def plot(df, path: Path, title: str = "KV policies: memory, throughput, prefill overhead") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df[df["status"] == "ok"]
    contexts = sorted(ok["context"].unique())
    varied = _varied(ok)
    fig, axes = plt.subplots(
        len(ROWS),
        len(contexts),
        squeeze=False,
        sharex=True,
        figsize=(max(9.0, 4.2 * len(contexts)), 2.6 * len(ROWS) + 1.0),
    )
    for j, ctx in enumerate(contexts):
        sub = ok[ok["context"] == ctx]
        for keys, g in sub.groupby(["kv_policy.name"] + varied, sort=True):
            keys = keys if isinstance(keys, tuple) else (keys,)
            label = " ".join([str(keys[0])] + [f"{v.split('.')[-1]}={k}" for v, k in zip(varied, keys[1:])])
            g = g.sort_values("kv_policy.budget")
            for i, (metric, _) in enumerate(ROWS):
                axes[i][j].plot(g["kv_policy.budget"], g[metric], marker="o", ms=3, label=label)
        axes[0][j].set_title(f"context {ctx / 1024:.0f}k", fontsize=10)
        axes[-1][j].set_xlabel("kv_policy.budget (tokens)")
        for i, (metric, name) in enumerate(ROWS):
            axes[i][j].set_xscale("log", base=2)
            if metric != "kv_select_pct_ttft":
                axes[i][j].set_yscale("log")
            if j == 0:
                axes[i][j].set_ylabel(name, fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = min(len(labels), 7 if not varied else 2)
    rows = -(-len(labels) // ncol)
    top = 1.0 - (0.035 + 0.022 * rows) * 12.0 / fig.get_figheight()
    fig.suptitle(f"{title} ({ok['model'].iloc[0]} on {ok['hardware'].iloc[0]})", y=0.995, fontsize=10)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.975), ncol=ncol, fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(p) -> None:
    p.add_argument("dir", metavar="DIR", help="a multirun (or sweep) directory of KV-policy results")
    p.add_argument("--out", help="PNG written (default: DIR/kv_tradeoff.png); a CSV beside it")


def run(a) -> int:
    root = Path(a.dir)
    out = Path(a.out) if a.out else root / "kv_tradeoff.png"
    if not root.is_dir():
        return errors(f"DIR {root}: no such directory")
    try:
        df = load(root)
    except BadResult as e:
        return errors(str(e))
    if not len(df) or not (df["status"] == "ok").any():
        return errors(f"no ok result.json under {root}")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    plot(df, out)
    print(
        f"wrote {out} and {out.with_suffix('.csv')} ({len(df)} results, "
        f"{int((df['status'] != 'ok').sum())} not ok)"
    )
    return 0


def main(argv: List[str]) -> int:
    return run_module("kvplot", sys.modules[__name__], argv)
