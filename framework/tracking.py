"""MLflow logging through `MlflowClient` (no global active-run state, safe in worker processes).
Only this module and the Hydra callback know MLflow."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PARENT_TAG = "mlflow.parentRunId"


def _client(uri: str):
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking_uri=uri)


def _prepare_sqlite(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)


def experiment_id(tracking) -> str:
    """Create (once) or find the experiment; creating it also creates the store."""
    _prepare_sqlite(tracking.uri)
    client = _client(tracking.uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    if exp is not None:
        return exp.experiment_id
    loc = None
    if tracking.artifact_root:
        loc = Path(tracking.artifact_root).resolve().as_uri()
    return client.create_experiment(tracking.experiment, artifact_location=loc)


def flatten(d: Any, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, (list, tuple)):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def component_tags(cfg_dict: Dict[str, Any]) -> Dict[str, str]:
    tags = {f"component.{g}": str(cfg_dict.get(g, {}).get("name", ""))
            for g in ("model", "hardware", "kv_policy", "optimizations", "workload")}
    tags["component.execution"] = str(cfg_dict.get("hardware", {}).get("execution", ""))
    return tags


def start_run(tracking, name: str, tags: Dict[str, str], parent: Optional[str] = None) -> str:
    exp = experiment_id(tracking)
    tags = dict(tags)
    if parent:
        tags[PARENT_TAG] = parent
    return _client(tracking.uri).create_run(exp, run_name=name, tags=tags).info.run_id


def end_run(tracking, run_id: str, status: str = "FINISHED") -> None:
    _client(tracking.uri).set_terminated(run_id, status=status)


def log_result(tracking, record: Dict[str, Any], name: str, files: Iterable[str] = (),
               parent: Optional[str] = None) -> str:
    """One MLflow run for one result record (see report.result_record). Returns the run id."""
    from mlflow.entities import Metric, Param
    cfg_dict = record["config"]
    tags = component_tags(cfg_dict)
    tags.update({"status": record["status"], "git_commit": git_commit()})
    if record["reason"]:
        tags["reason"] = record["reason"][:5000]
    if record["notes"]:
        tags["notes"] = "; ".join(record["notes"])[:5000]
    run_id = start_run(tracking, name, tags, parent)
    client = _client(tracking.uri)
    params = [Param(k, str(v)[:6000]) for k, v in flatten(
        {g: v for g, v in cfg_dict.items() if g not in ("tracking",)}).items()]
    now = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now, 0) for k, v in record["metrics"].items()]
    for i in range(0, max(len(params), len(metrics)), 100):
        client.log_batch(run_id, metrics=metrics[i:i + 100], params=params[i:i + 100])
    for f in files:
        client.log_artifact(run_id, f)
    # infeasible and invalid designs are results too: the run finishes, its `status` tag says why
    client.set_terminated(run_id, status="FINISHED")
    return run_id
