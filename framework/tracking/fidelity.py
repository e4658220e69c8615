"""MLflow runs of a fidelity grid: a parent run with the grid and files, a child per policy and
budget with its fidelity_* metrics."""

from __future__ import annotations

import time
from typing import List
from pathlib import Path

from decodelab.fidelity.report import metric_rows
from decodelab.fidelity.run import Results
from decodelab.tracking import store as tracking


def log_mlflow(cfg, res: Results, variants, summ, files: List[Path]) -> str:
    """A parent run `fidelity <name>` (grid as params, files as artifacts) and a child run per
    policy and budget (the policy's fields as params, fidelity_* metrics)."""
    import pandas as pd
    from mlflow.entities import Metric, Param

    tr = cfg.tracking
    client = tracking._client(tr.uri)
    parent = tracking.start_run(
        tr, f"fidelity {cfg.name}", {"kind": "fidelity", "mlflow.source.git.commit": tracking.git_commit()}
    )
    grid = {
        k: str(cfg[k])
        for k in (
            "policies",
            "aliases",
            "policy_overrides",
            "budgets",
            "lengths",
            "depths",
            "seeds",
            "digits",
            "streaming_prefill",
            "model",
        )
    }
    grid.update({"text.context": str(cfg.text.context), "text.eval_tokens": str(cfg.text.eval_tokens)})
    now = int(time.time() * 1000)
    client.log_batch(
        parent,
        params=[Param(f"fidelity.{k}", v[:6000]) for k, v in grid.items()],
        metrics=[Metric(f"fidelity_seconds_{k}", float(v), now, 0) for k, v in res.seconds.items()],
    )
    for f in files:
        client.log_artifact(parent, str(f), "fidelity")
    metrics = metric_rows(summ, pd.DataFrame(res.rows))
    for v in variants:
        tags = {
            "kind": "fidelity",
            "component.kv_policy": v.policy,
            "component.model": cfg.model,
            "fidelity.label": v.label,
            "fidelity.policy": v.name,
        }
        run_id = tracking.start_run(tr, f"fidelity {v.label}", tags, parent=parent)
        params = [Param(f"kv_policy.{k}", str(x)[:6000]) for k, x in tracking.flatten(v.fields).items()]
        params += [Param("fidelity.budget", str(v.budget)), Param("model.name", cfg.model)]
        ms = [Metric(k, x, now, 0) for k, x in metrics.get(v.label, {}).items()]
        for i in range(0, max(len(params), len(ms)), 100):
            client.log_batch(run_id, metrics=ms[i : i + 100], params=params[i : i + 100])
        tracking.end_run(tr, run_id)
    tracking.end_run(tr, parent)
    return parent
