"""Files, table and MLflow runs of a fidelity grid, and the `decodelab fidelity` entry point."""
from __future__ import annotations

import time
from pathlib import Path
from typing import List

import numpy as np

from framework.fidelity import plots
from framework.fidelity.run import Results, compose_fidelity, run, summary

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
        a = np.mean(arrs, axis=0)                                 # [L, H, 5]
        for l in range(a.shape[0]):
            for h in range(a.shape[1]):
                recs.append({"label": label, "layer": l, "head": h,
                             **{c: float(a[l, h, i]) for i, c in enumerate(LAYER_HEAD_COLUMNS)}})
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
        m = {f"fidelity_{k}": float(r[k]) for k in r.index
             if k not in ("label", "policy", "budget") and r[k] == r[k]}
        pk = df[(df.task == "passkey") & (df.label == r["label"])]
        for L, g in pk.groupby("length"):
            m[f"fidelity_passkey_acc_len{int(L)}"] = float(g.exact.mean())
        for d, g in pk.groupby("depth"):
            m[f"fidelity_passkey_acc_depth{int(round(100 * d))}"] = float(g.exact.mean())
        out[r["label"]] = m
    return out


def log_mlflow(cfg, res: Results, variants, summ, files: List[Path]) -> str:
    """A parent run `fidelity <name>` (grid as params, files as artifacts) and a child run per
    policy and budget (the policy's fields as params, fidelity_* metrics)."""
    import pandas as pd
    from mlflow.entities import Metric, Param
    from framework import tracking
    tr = cfg.tracking
    client = tracking._client(tr.uri)
    parent = tracking.start_run(tr, f"fidelity {cfg.name}", {"kind": "fidelity", "git_commit": tracking.git_commit()})
    grid = {k: str(cfg[k]) for k in ("policies", "aliases", "policy_overrides", "budgets", "lengths",
                                     "depths", "seeds", "digits", "streaming_prefill", "model")}
    grid.update({"text.context": str(cfg.text.context), "text.eval_tokens": str(cfg.text.eval_tokens)})
    now = int(time.time() * 1000)
    client.log_batch(parent, params=[Param(f"fidelity.{k}", v[:6000]) for k, v in grid.items()],
                     metrics=[Metric(f"fidelity_seconds_{k}", float(v), now, 0) for k, v in res.seconds.items()])
    for f in files:
        client.log_artifact(parent, str(f), "fidelity")
    metrics = metric_rows(summ, pd.DataFrame(res.rows))
    for v in variants:
        tags = {"kind": "fidelity", "component.kv_policy": v.policy, "component.model": cfg.model,
                "fidelity.label": v.label, "fidelity.policy": v.name}
        run_id = tracking.start_run(tr, f"fidelity {v.label}", tags, parent=parent)
        params = [Param(f"kv_policy.{k}", str(x)[:6000]) for k, x in tracking.flatten(v.fields).items()]
        params += [Param("fidelity.budget", str(v.budget)), Param("model.name", cfg.model)]
        ms = [Metric(k, x, now, 0) for k, x in metrics.get(v.label, {}).items()]
        for i in range(0, max(len(params), len(ms)), 100):
            client.log_batch(run_id, metrics=ms[i:i + 100], params=params[i:i + 100])
        tracking.end_run(tr, run_id)
    tracking.end_run(tr, parent)
    return parent


def print_summary(summ, res: Results, cfg) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"decodelab fidelity ({cfg.name}): SmolLM2-135M, accuracy vs KV memory")
    cols = [("label", "policy@budget", "{}"), ("memory_saved", "mem saved", "{:.0%}"),
            ("passkey_acc", "passkey", "{:.2f}"), ("passkey_digits", "digits", "{:.2f}"),
            ("needle_kept", "needle kept", "{:.2f}"), ("recall", "attn recall", "{:.3f}"),
            ("relerr", "out rel err", "{:.3f}"), ("agreement", "next-tok agree", "{:.2f}"),
            ("ppl_ratio", "ppl / full", "{:.3f}")]
    cols = [c for c in cols if c[0] in summ]
    for _, head, _ in cols:
        t.add_column(head, justify="left" if head == "policy@budget" else "right")
    for _, r in summ.iterrows():
        t.add_row(*[("-" if r[k] != r[k] else fmt.format(r[k])) for k, _, fmt in cols])
    Console(width=140).print(t)
    Console(width=140).print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()))


def main(argv: List[str]) -> int:
    """`decodelab fidelity [--ci] [overrides]`; exit 2 on bad input or a missing model."""
    from framework.fidelity.weights import ModelUnavailable
    from framework.validate import ConfigError
    ci = "--ci" in argv
    overrides = [a for a in argv if a != "--ci"]
    try:
        cfg = compose_fidelity(overrides, ci=ci)
    except Exception as e:                  # Hydra / OmegaConf: unknown key, wrong type, bad syntax
        msg = " ".join(x.strip() for x in str(e).splitlines() if x.strip() and "hydra.cc" not in x)
        print(f"error: {msg or type(e).__name__}")
        return 2
    try:
        progress = None if cfg.quiet else (lambda s: print(f"[fidelity] {s}", flush=True))
        res, variants = run(cfg, progress)
    except ConfigError as e:
        for line in str(e).splitlines():
            print(f"error: {line}")
        return 2
    except ModelUnavailable as e:
        print(f"error: model: {e}")
        return 2
    summ = summary(res)
    out_dir = Path(cfg.out_dir) / cfg.name
    try:
        files = write_files(res, summ, out_dir)
    except OSError as e:                    # out_dir not writable, disk full
        print(f"error: out_dir: {e}")
        return 2
    if not cfg.quiet:
        print_summary(summ, res, cfg)
        print(f"files: {out_dir}")
    if cfg.tracking.enabled:
        try:
            log_mlflow(cfg, res, variants, summ, files)
        except Exception as e:  # never lose the results to a tracker problem
            print(f"warning: fidelity runs not logged to MLflow ({type(e).__name__}: {e})")
    return 0
