"""Files and terminal table of a serving run (framework/modes/serving/simulate.py): requests.csv (one row per
request), timeline.csv (one row per engine step), latency.png (TTFT / TPOT / end-to-end
distributions) and timeline.png (batch occupancy, KV memory and queue over time). The MLflow
callback logs whatever `write_outputs` returns, so these become the run's artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from decodelab.kernel_layout import CAUSES
from decodelab.modes.serving.layout import Req, StepLog

GIB = float(2**30)
MAX_TIMELINE_ROWS = 100_000  # longer runs are written every k-th step


def requests_table(res: Dict[str, Any]):
    import pandas as pd

    r = res["serving"]["requests"]
    out = r[:, Req.OUTPUT]
    df = pd.DataFrame(
        {
            "arrival_s": r[:, Req.ARRIVAL],
            "prompt_len": r[:, Req.PROMPT].astype(int),
            "output_len": out.astype(int),
            "queue_ms": (r[:, Req.START] - r[:, Req.ARRIVAL]) * 1e3,
            "ttft_ms": (r[:, Req.FIRST] - r[:, Req.ARRIVAL]) * 1e3,
            "tpot_ms": (r[:, Req.DONE] - r[:, Req.FIRST]) / (out - 1.0) * 1e3,
            "e2e_ms": (r[:, Req.DONE] - r[:, Req.ARRIVAL]) * 1e3,
            "max_itl_ms": r[:, Req.MAX_ITL] * 1e3,
            "preemptions": r[:, Req.PREEMPT].astype(int),
        }
    )
    df.index.name = "request"
    return df


def timeline_table(res: Dict[str, Any]):
    import pandas as pd

    s = res["serving"]["steps"]
    stride = max(1, int(np.ceil(len(s) / MAX_TIMELINE_ROWS)))
    s = s[::stride]
    per_tok = res["serving"]["kv_bytes_per_token_chip"]
    df = pd.DataFrame(
        {
            "start_s": s[:, StepLog.START],
            "duration_ms": s[:, StepLog.DUR] * 1e3,
            "sequences": s[:, StepLog.SEQS].astype(int),
            "padded_batch": s[:, StepLog.PADDED].astype(int),
            "tokens": s[:, StepLog.TOKENS],
            "prefill_tokens": s[:, StepLog.PREFILL],
            "decode_tokens": s[:, StepLog.DECODE].astype(int),
            "kv_gib": s[:, StepLog.KV] * per_tok / GIB,
            "kv_reserved_gib": s[:, StepLog.RESERVED] * per_tok / GIB,
            "waiting": s[:, StepLog.WAIT].astype(int),
        }
    )
    for k, cause in enumerate(CAUSES):
        df[f"{cause}_ms"] = s[:, StepLog.CAUSE + k] * 1e3
    return df


def _hist_range(v: np.ndarray) -> Tuple[float, float]:
    """The histogram's x range: the data's, widened to 1 ms around them when the values agree to
    within float resolution (identical requests; numpy cannot cut a range of a few ulps into bins)."""
    lo, hi = float(np.min(v)), float(np.max(v))
    if not hi - lo > 1e-9 * max(1.0, abs(hi)):
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


def latency_plot(res: Dict[str, Any], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = requests_table(res)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, col, name in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT", "end-to-end")):
        v = df[col].to_numpy()
        ax.hist(v, bins=min(50, max(5, len(v) // 10)), range=_hist_range(v), color="#4c72b0", alpha=0.85)
        for p, ls in ((50, "-"), (90, "--"), (99, ":")):
            x = np.percentile(v, p)
            ax.axvline(x, color="#c44e52", ls=ls, lw=1, label=f"p{p} {x:.1f}")
        ax.set_xlabel(f"{name} (ms)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("requests")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeline_plot(res: Dict[str, Any], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = timeline_table(res)
    t = df["start_s"].to_numpy()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    a1.step(t, df["sequences"], where="post", lw=0.8, label="sequences in step")
    a1.step(t, df["waiting"], where="post", lw=0.8, color="#dd8452", label="waiting")
    if (df["padded_batch"] != df["sequences"]).any():
        a1.step(t, df["padded_batch"], where="post", lw=0.8, color="#8172b3", label="padded batch")
    a1.set_ylabel("requests")
    a1.legend(fontsize=7, loc="upper right")
    a2.step(t, df["kv_gib"], where="post", lw=0.8, color="#55a868", label="KV held")
    a2.step(t, df["kv_reserved_gib"], where="post", lw=0.8, ls="--", color="#937860", label="KV reserved")
    a2.axhline(res["metrics"]["kv_pool_gib"], color="#c44e52", lw=0.8, label="KV pool")
    a2.set_ylabel("GiB per chip")
    a2.set_xlabel("time (s)")
    a2.legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_serving(
    res: Dict[str, Any], out_dir: Path, label: str, plots: bool = True, step_csv: bool = True
) -> Dict[str, str]:
    files = {}
    p = out_dir / "requests.csv"
    requests_table(res).to_csv(p, float_format="%.6g")
    files["requests"] = str(p)
    if res["serving"].get("steps") is None:
        return files
    if step_csv:
        p = out_dir / "timeline.csv"
        timeline_table(res).to_csv(p, index=False, float_format="%.6g")
        files["timeline"] = str(p)
    if plots:
        files["latency_plot"] = str(latency_plot(res, out_dir / "latency.png", label))
        files["timeline_plot"] = str(timeline_plot(res, out_dir / "timeline.png", label))
    return files


def cost_rows(m: Dict[str, float]) -> list:
    """Table rows of the normalised units (framework/core/cost.py), as far as the config gives them."""
    rows = [("tokens/s per chip", f"{m['tok_s_per_chip']:.1f}")] if "tok_s_per_chip" in m else []
    if "energy_j_per_token" in m:
        rows.append(
            (
                "power per chip / energy per token",
                f"{m['chip_power_w']:.0f} W ({m['chip_busy_pct']:.0f} % busy) / {m['energy_j_per_token']:.3f} J",
            )
        )
    if "cost_per_mtok" in m:
        rows.append(("cost per million tokens", f"{m['cost_per_mtok']:.3f}"))
    return rows


def print_serving(label: str, res: Dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    m = res["metrics"]
    t = Table(title=label, show_header=True, header_style="bold")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for key, name in (
        ("ttft", "TTFT (ms)"),
        ("tpot", "TPOT (ms)"),
        ("itl", "inter-token (ms)"),
        ("e2e", "end-to-end (ms)"),
    ):
        t.add_row(name, *(f"{m[f'{key}{s}_ms']:.2f}" for s in ("", "_p50", "_p90", "_p99")))
    if "prefill_ttft_ms" in m:  # disaggregated: the prefill end, before the KV transfer
        t.add_row(
            "prefill end (ms)", *(f"{m[f'prefill_ttft{s}_ms']:.2f}" for s in ("", "_p50", "_p90", "_p99"))
        )
    Console().print(t)
    s = Table(show_header=False)
    s.add_column("metric")
    s.add_column("value", justify="right")
    rows = disagg_rows(m) if "kv_transfer_ms" in m else serving_rows(m)
    for r in rows:
        s.add_row(*r)
    Console().print(s)
    for n in res["notes"]:
        Console().print(f"note: {n}")


def disagg_rows(m: Dict[str, float]) -> list:
    """The summary rows of a disaggregated run (framework/modes/serving/disagg.py)."""
    return [
        ("requests / preemptions", f"{m['n_requests']:.0f} / {m['n_preemptions']:.0f}"),
        ("chips prefill + decode", f"{m['prefill_chips']:.0f} + {m['decode_chips']:.0f}"),
        ("tokens/s system / per user", f"{m['tok_s_system']:.1f} / {m['tok_s_user']:.1f}"),
        ("requests/s per chip", f"{m['requests_per_s_per_chip']:.3f}"),
        ("tokens/s per chip", f"{m['tok_s_per_chip']:.1f}"),
        ("KV transfer mean / p90", f"{m['kv_transfer_ms']:.3f} / {m['kv_transfer_p90_ms']:.3f} ms"),
        ("KV per transfer per chip mean", f"{m['kv_transfer_mib']:.1f} MiB"),
        ("queue wait prefill / decode", f"{m['prefill_queue_ms']:.2f} / {m['decode_queue_ms']:.2f} ms"),
        ("busy prefill / decode pool", f"{m['prefill_busy_pct']:.1f} / {m['decode_busy_pct']:.1f} %"),
        ("decode batch mean / max", f"{m['decode_batch_mean']:.1f} / {m['decode_batch_max']:.0f}"),
        ("decode KV max / pool per chip", f"{m['kv_mem_max_gib']:.2f} / {m['kv_pool_gib']:.2f} GiB"),
    ] + [(name, f"{m[key]:.3f}") for key, name in DISAGG_COST if key in m]


DISAGG_COST = (
    ("energy_j_per_token", "energy per token (J), both pools"),
    ("cost_per_mtok", "cost per million tokens"),
)


def serving_rows(m: Dict[str, float]) -> list:
    rows = [
        (
            "requests / steps / preemptions",
            f"{m['n_requests']:.0f} / {m['n_steps']:.0f} / {m['n_preemptions']:.0f}",
        ),
        ("tokens/s aggregate (system)", f"{m['tok_s_aggregate']:.1f} ({m['tok_s_system']:.1f})"),
        ("tokens/s per user", f"{m['tok_s_user']:.1f}"),
        ("batch mean / max", f"{m['batch_mean']:.1f} / {m['batch_max']:.0f}"),
        (
            "KV mean / max / pool per chip",
            f"{m['kv_mem_mean_gib']:.2f} / {m['kv_mem_max_gib']:.2f} / {m['kv_pool_gib']:.2f} GiB",
        ),
        ("queue wait mean", f"{m['queue_ms']:.2f} ms"),
        ("time in steps with prefill", f"{m['mixed_step_time_pct']:.1f} %"),
    ]
    steps = [f"{m[k]:.2f}" if k in m else "-" for k in ("prefill_step_ms", "decode_step_ms")]
    rows.append(("step mean, with prefill / decode only", f"{steps[0]} / {steps[1]} ms"))
    rows += cost_rows(m)
    for cause in CAUSES:
        rows.append(
            (
                f"  TPOT {cause}",
                f"{m[f'tpot_{cause}_ms']:.3f} ms ({m[f'time_{cause}_pct']:.0f} % of engine time)",
            )
        )
    return rows
