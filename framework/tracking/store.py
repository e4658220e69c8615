"""MLflow logging through `MlflowClient` (no global active-run state, safe in worker processes).
Only this module and the Hydra callback know MLflow."""

from __future__ import annotations

import functools
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from decodelab.tracking.local_store import open_store
from decodelab.tracking.sqlite import DIR_MODE, StoreError, prepare_sqlite, store_lock, tune_sqlite  # noqa: F401

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A tracking server that went away should not stall a run or a sweep for minutes (MLflow's
# default is 7 retries with exponential backoff): fail within seconds; `decodelab sync` catches
# up later. Every path that logs (Hydra callback, fast sweep, sync) imports this module first.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

PARENT_TAG = "mlflow.parentRunId"
# Files next to a result: the run that holds it, the sweep's parent run, and the designs a
# sweep directory's tracker already holds ({config hash: run id}).
PARENT_FILE = "mlflow_parent_run_id"
RUN_ID_FILE = "mlflow_run_id"
RECORDED_FILE = "recorded.json"
HASH_TAG = "config_hash"  # report.config_hash of the resolved design: resume and sync key


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:"):
        return MlflowClient(tracking_uri=uri)
    tune_sqlite()
    path = Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None
    if path is None or uri in _OPENED:
        return MlflowClient(tracking_uri=uri)
    open_store(path)  # checked within seconds, or created complete under the store's lock
    _OPENED.add(uri)
    return MlflowClient(tracking_uri=uri)


_OPENED: set = set()  # SQLite URIs this process has checked or created (local_store.open_store)


def _artifact_root(root: str) -> str:
    """The experiment's artifact location as a URI; a local root we create is 0700."""
    path = Path(root).resolve()
    try:
        path.mkdir(parents=True, mode=DIR_MODE)
        os.chmod(path, DIR_MODE)
    except FileExistsError:  # the user's, or another process's: left as it is
        pass
    return path.as_uri()


def experiment_id(tracking) -> str:
    """Create (once) or find the experiment; creating it also creates the store."""
    prepare_sqlite(tracking.uri)
    client = _client(tracking.uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    if exp is not None:
        return exp.experiment_id
    loc = _artifact_root(tracking.artifact_root) if tracking.artifact_root else None
    try:
        return client.create_experiment(tracking.experiment, artifact_location=loc)
    except Exception:  # another process created it meanwhile
        exp = client.get_experiment_by_name(tracking.experiment)
        if exp is None:
            raise
        return exp.experiment_id


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


@functools.lru_cache(maxsize=None)
def git_commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def component_tags(cfg_dict: Dict[str, Any]) -> Dict[str, str]:
    tags = {
        f"component.{g}": str(cfg_dict.get(g, {}).get("name", ""))
        for g in ("model", "hardware", "kv_policy", "optimizations", "workload")
    }
    tags["component.execution"] = str(cfg_dict.get("hardware", {}).get("execution", ""))
    return tags


def start_run(tracking, name: str, tags: Dict[str, str], parent: Optional[str] = None) -> str:
    exp = experiment_id(tracking)
    tags = dict(tags)
    if parent:
        tags[PARENT_TAG] = parent
    return _client(tracking.uri).create_run(exp, run_name=name, tags=tags).info.run_id


def end_run(
    tracking, run_id: str, status: str = "FINISHED", metrics: Optional[Dict[str, float]] = None
) -> None:
    """End a (sweep parent) run, with its summary metrics (sweep_metrics) if given."""
    client = _client(tracking.uri)
    if metrics:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
    client.set_terminated(run_id, status=status)


# A sweep parent's "best" metrics: the headline metrics, with the direction that is better.
BEST = {"tok_s_aggregate": max, "tok_s_user": max, "tpot_ms": min, "ttft_ms": min}


def sweep_metrics(records: Iterable[Dict[str, Any]]) -> Dict[str, float]:
    """Summary metrics of a sweep's parent run from its result records: n_<status> per status
    (n_ok, n_infeasible, n_invalid, n_error), n_designs, and best_<metric> over the ok results
    for the headline metrics (BEST: highest tok/s, lowest TPOT and TTFT)."""
    records = list(records)
    out: Dict[str, float] = {f"n_{s}": 0.0 for s in ("ok", "infeasible", "invalid", "error")}
    for r in records:
        out[f"n_{r.get('status', 'error')}"] = out.get(f"n_{r.get('status', 'error')}", 0.0) + 1
    out["n_designs"] = float(len(records))
    ok = [r["metrics"] for r in records if r.get("status") == "ok"]
    for key, best in BEST.items():
        vals = [float(m[key]) for m in ok if isinstance(m.get(key), (int, float))]
        if vals:
            out[f"best_{key}"] = best(vals)
    return out


def design_params(cfg_dict: Dict[str, Any]) -> Dict[str, Any]:
    """The config as MLflow params: all but `tracking`; of an optional feature that is off
    (a group with `enabled: false`, e.g. speculative, coe) only its switch, not the ~100 fields
    of its unused draft/expert models (they cluttered the UI and doubled the cost of a run)."""
    return {
        g: {"enabled": False} if isinstance(v, dict) and v.get("enabled") is False else v
        for g, v in cfg_dict.items()
        if g != "tracking"
    }


def run_payload(record: Dict[str, Any]):
    """The tags, params and metrics of the MLflow run of one result record (see
    report.result_record): the same for a Hydra job, a fast sweep and `decodelab sync`."""
    from mlflow.entities import Metric, Param

    cfg_dict = record["config"]
    tags = component_tags(cfg_dict)
    tags.update({"status": record["status"], "mlflow.source.git.commit": git_commit()})
    if record.get("config_hash"):
        tags[HASH_TAG] = record["config_hash"]
    if record["reason"]:
        tags["reason"] = record["reason"][:5000]
    if record["notes"]:
        tags["notes"] = "; ".join(record["notes"])[:5000]
    flat = flatten(design_params(cfg_dict))
    filled = record["metrics"].get("batch_size")
    if flat.get("workload.batch_fill") and filled:  # the batch simulated, not the configured 1
        flat["workload.batch_size"] = int(filled)
    params = [Param(k, str(v)[:6000]) for k, v in flat.items()]
    now = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now, 0) for k, v in record["metrics"].items()]
    return tags, params, metrics


def log_payload(
    client, exp_id: str, name: str, payload, files: Iterable[str] = (), parent: Optional[str] = None
) -> str:
    """Write one finished run (tags at creation, params and metrics in batches of 100)."""
    tags, params, metrics = payload
    tags = dict(tags)
    if parent:
        tags[PARENT_TAG] = parent
    info = client.create_run(exp_id, run_name=name, tags=tags).info
    run_id = info.run_id
    for i in range(0, max(len(params), len(metrics)), 100):
        client.log_batch(run_id, metrics=metrics[i : i + 100], params=params[i : i + 100])
    files = list(files)
    if files and info.artifact_uri.startswith("file:"):
        # a local artifact store: copy directly (client.log_artifact looks the run up each time)
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repo = get_artifact_repository(info.artifact_uri)
        for f in files:
            repo.log_artifact(f)
    else:
        for f in files:
            client.log_artifact(run_id, f)
    # infeasible and invalid designs are results too: the run finishes, its `status` tag says why
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def log_link(client, exp_id: str, record: Dict[str, Any], origin: str, parent: Optional[str]) -> str:
    """A child run for a design a sweep reused: tags `reused`, `reused_from` (the run holding
    the original result), its status, reason and components, and its metrics; no params or
    files. Its hash is tagged `reused_config_hash`, not `config_hash`, so resume and sync keep
    pointing at the original."""
    from mlflow.entities import Metric

    tags = component_tags(record.get("config") or {})
    tags.update(
        {
            "status": record["status"],
            "reused": "true",
            "reused_from": origin,
            "reused_config_hash": record.get("config_hash") or "",
            "mlflow.source.git.commit": git_commit(),
        }
    )
    if parent:
        tags[PARENT_TAG] = parent
    if record.get("reason"):
        tags["reason"] = record["reason"][:5000]
    run_id = client.create_run(exp_id, run_name=record.get("name") or "reused", tags=tags).info.run_id
    now = int(time.time() * 1000)
    ms = [Metric(k, float(v), now, 0) for k, v in (record.get("metrics") or {}).items()]
    for i in range(0, len(ms), 100):
        client.log_batch(run_id, metrics=ms[i : i + 100])
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def log_result(
    tracking, record: Dict[str, Any], name: str, files: Iterable[str] = (), parent: Optional[str] = None
) -> str:
    """One MLflow run for one result record (see report.result_record). Returns the run id."""
    return log_payload(
        _client(tracking.uri), experiment_id(tracking), name, run_payload(record), files, parent
    )


def recorded_hashes(tracking) -> Dict[str, str]:
    """{config hash: run id} of the finished runs in the experiment (what resuming skips)."""
    client = _client(tracking.uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    if exp is None:
        return {}
    return {h: ids[0] for h, ids in runs_by_hash(client, exp.experiment_id, "FINISHED").items()}


def runs_by_hash(client, exp_id: str, status: str) -> Dict[str, list]:
    """{config hash: run ids} of the experiment's runs in `status`, every page of them."""
    out: Dict[str, list] = {}
    token = None
    while True:
        page = client.search_runs(
            [exp_id],
            max_results=5000,
            page_token=token,
            filter_string=f"tags.{HASH_TAG} != '' and attributes.status = '{status}'",
        )
        for r in page:
            out.setdefault(r.data.tags[HASH_TAG], []).append(r.info.run_id)
        token = page.token
        if not token:
            return out


def log_summary_run(
    tracking,
    name: str,
    tags: Dict[str, str],
    metrics: Dict[str, float],
    tables: Dict[str, Any] = None,
    files: Iterable[tuple] = (),
) -> str:
    """One finished run holding a summary: metrics, DataFrames as CSV artifacts ({file name:
    DataFrame}) and files ((path, artifact subdir or None)). For tables of many designs at once
    (claims, validate). Metric names are reduced to MLflow's alphabet."""
    import tempfile

    run = start_run(tracking, name, {**tags, "mlflow.source.git.commit": git_commit()})
    client = _client(tracking.uri)
    for key, value in metrics.items():
        safe = "".join(c for c in key.replace(" ", "_").replace("/", "_per_") if c.isalnum() or c in "_-.")[
            :250
        ]
        client.log_metric(run, safe, float(value))
    with tempfile.TemporaryDirectory() as d:
        for fname, df in (tables or {}).items():
            p = Path(d) / fname
            df.to_csv(p, index=False, float_format="%.6g")
            client.log_artifact(run, str(p))
    for path, sub in files:
        client.log_artifact(run, str(path), sub)
    end_run(tracking, run)
    return run


def select_runs(
    uri: str, experiment: str, run_ids: List[str], filter_string: str = "", max_results: int = 10000
):
    """The chosen runs as mlflow.search_runs' DataFrame (one row per run); None if `uri` is a
    SQLite store that does not exist (reading never creates one)."""
    import mlflow

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        return None
    _client(uri)  # SQLite tuning, as for every tracker access
    mlflow.set_tracking_uri(uri)
    if run_ids:
        quoted = ", ".join(f"'{r}'" for r in run_ids)
        clause = f"attributes.run_id IN ({quoted})"
        filter_string = f"{clause} and {filter_string}" if filter_string else clause
        df = mlflow.search_runs(
            search_all_experiments=True, filter_string=filter_string, max_results=max_results
        )
    else:
        df = mlflow.search_runs(
            experiment_names=[experiment], filter_string=filter_string, max_results=max_results
        )
    if "tags.sweep" in df.columns:
        df = df[df["tags.sweep"] != "true"]
    return df
