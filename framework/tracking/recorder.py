"""Recording many results in MLflow from one process (`decodelab sweep`, `decodelab sync`).

- The store, the experiment and the sweep's parent run are created once, before any worker
  starts (concurrent first-time creation of a SQLite store corrupts it).
- Child runs are written one after another by the calling process with the same tags, params
  and metrics as the Hydra callback's (tracking.run_payload / log_payload); after each, a
  `mlflow_run_id` file next to the result marks it recorded (what `decodelab sync` skips).
- A design's params are flattened by the function the caller passes (`params`:
  decodelab.output.flat.flat_params, which this layer may not import), the same one the results
  table and load_results use; without it, tracking.store.run_payload's own.
- The first tracker error stops all further attempts (no timeout per result while a server is
  down): results stay on disk, unmarked, for `decodelab sync`.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from decodelab.tracking import store as tracking
from decodelab.tracking.store import PARENT_FILE, RUN_ID_FILE


def tracking_ns(tr: Dict) -> SimpleNamespace:
    """A tracking config (dict) with the attribute access tracking.py expects."""
    return SimpleNamespace(**{"artifact_root": "", "experiment": "decodelab", **tr})


Params = Callable[[Dict[str, Any]], Dict[str, Any]]  # a resolved config -> flat params


def payload(record: Dict[str, Any], params: Optional[Params] = None):
    """tracking.store.run_payload(record) (tags, params, metrics), with the params flattened by
    `params` when given; of a batch-fill design `workload.batch_size` is the batch simulated."""
    tags, old, metrics = tracking.run_payload(record)
    if params is None:
        return tags, old, metrics
    from mlflow.entities import Param

    flat = {k: str(v) for k, v in params(record["config"]).items()}
    filled = record["metrics"].get("batch_size")
    if flat.get("workload.batch_fill") == "True" and filled:
        flat["workload.batch_size"] = str(int(filled))
    return tags, [Param(k, v[:6000]) for k, v in flat.items()], metrics


def log_record(
    tr, record: Dict, name: str, files: Iterable[str] = (), parent: Optional[str] = None, params=None
) -> str:
    """One MLflow run for one result record (tracking.store.log_result, params by `params`)."""
    client = tracking._client(tr.uri)
    return tracking.log_payload(
        client, tracking.experiment_id(tr), name, payload(record, params), files, parent
    )


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


class Recorder:
    """MLflow runs of one sweep directory: a parent run, one child run per result."""

    def __init__(
        self,
        tr: Dict,
        sweep_dir: Optional[Path],
        parent_name: Optional[str],
        parent_tags: Optional[Dict[str, str]] = None,
        params: Optional[Params] = None,
    ) -> None:
        """parent_name None: no parent run (results of single runs); params: how a design's
        config becomes its MLflow params (decodelab.output.flat.flat_params)."""
        self.tr = tracking_ns(tr)
        self.params = params
        self.sweep_dir = Path(sweep_dir) if sweep_dir else None
        self.error: Optional[str] = None
        self.n_recorded = 0
        self.seconds = 0.0  # time spent writing runs
        self.parent: Optional[str] = None
        self.parent_status: Optional[str] = None  # of the parent when first seen (None: new)
        try:
            self.client = tracking._client(self.tr.uri)
            self.exp = tracking.experiment_id(self.tr)  # creates the store, once
            if parent_name is not None:
                self.parent = self._parent(parent_name, parent_tags or {})
        except Exception as e:  # the tracker must never lose or crash a result
            self.error = short_error(e)

    def _parent(self, name: str, tags: Dict[str, str]) -> str:
        f = self.sweep_dir / PARENT_FILE
        if f.is_file():  # a sweep directory recorded before (sync, resumed sweep)
            run_id = f.read_text().strip()
            try:
                run = self.client.get_run(run_id)
                if run.info.experiment_id == self.exp and run.info.lifecycle_stage == "active":
                    self.parent_status = run.info.status
                    return run_id
            except Exception:
                pass  # that run is not in this tracker: make a new parent
        tags = {
            "sweep": "true",
            "sweep_dir": str(self.sweep_dir),
            "mlflow.source.git.commit": tracking.git_commit(),
            **tags,
        }
        run_id = tracking.start_run(self.tr, name, tags)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        f.write_text(run_id)
        return run_id

    @property
    def ok(self) -> bool:
        return self.error is None

    def recorded_hashes(self) -> Dict[str, str]:
        """{config hash: run id} already in the experiment ({} when the tracker is down)."""
        if not self.ok:
            return {}
        try:
            return tracking.recorded_hashes(self.tr)
        except Exception as e:
            self.error = short_error(e)
            return {}

    def stored_runs(self) -> Dict[str, Dict]:
        """{config hash: {run_id, status, reason, metrics}} of the finished runs of single
        designs in the experiment (not sweep parents, not links to reused designs); {} when
        the tracker is down."""
        if not self.ok:
            return {}
        out: Dict[str, Dict] = {}
        try:
            token = None
            while True:
                page = self.client.search_runs(
                    [self.exp],
                    max_results=5000,
                    page_token=token,
                    filter_string=f"tags.{tracking.HASH_TAG} != '' and attributes.status = 'FINISHED'",
                )
                for r in page:
                    t = r.data.tags
                    out.setdefault(
                        t[tracking.HASH_TAG],
                        {
                            "run_id": r.info.run_id,
                            "status": t.get("status", ""),
                            "reason": t.get("reason", ""),
                            "metrics": dict(r.data.metrics),
                        },
                    )
                token = page.token
                if not token:
                    return out
        except Exception as e:
            self.error = short_error(e)
            return {}

    def sweep_tables(self, name: str, into: Path) -> List[Tuple[str, Path]]:
        """[(parent run id, local file)] of the results tables (artifact `name`) of the sweeps
        in the experiment, oldest first; files of a remote artifact store are downloaded into
        `into`. [] when the tracker is down."""
        if not self.ok:
            return []
        out = []
        try:
            runs = self.client.search_runs(
                [self.exp], filter_string="tags.sweep = 'true'", max_results=5000, order_by=["start_time ASC"]
            )
            for r in runs:
                uri = r.info.artifact_uri
                if uri.startswith("file:"):
                    from urllib.parse import urlparse
                    from urllib.request import url2pathname

                    f = Path(url2pathname(urlparse(uri).path)) / name
                    if f.is_file():
                        out.append((r.info.run_id, f))
                    continue
                if not any(a.path == name for a in self.client.list_artifacts(r.info.run_id)):
                    continue
                d = Path(into) / r.info.run_id
                d.mkdir(parents=True, exist_ok=True)
                out.append((r.info.run_id, Path(self.client.download_artifacts(r.info.run_id, name, str(d)))))
        except Exception as e:
            self.error = short_error(e)
            return []
        return out

    def link(self, rec: Dict, origin: str) -> Optional[str]:
        """A child run of this sweep's parent for a design it reused: tagged `reused` and
        `reused_from` (the run that holds the original result), with its status and metrics,
        no params or files. It carries no `config_hash` tag (its hash is `reused_config_hash`),
        so resume and sync keep pointing at the original."""
        if not self.ok:
            return None
        t0 = time.perf_counter()
        try:
            run_id = tracking.log_link(self.client, self.exp, rec, origin, self.parent)
        except Exception as e:
            self.error = short_error(e)
            return None
        finally:
            self.seconds += time.perf_counter() - t0
        self.n_recorded += 1
        return run_id

    def record(self, rec: Dict, files: Iterable[str] = ()) -> Optional[str]:
        """Log one result record as a child run; mark its directory. None if not recorded."""
        if not self.ok:
            return None
        t0 = time.perf_counter()
        try:
            run_id = tracking.log_payload(
                self.client, self.exp, rec["name"], payload(rec, self.params), files, self.parent
            )
        except Exception as e:
            self.error = short_error(e)
            return None
        finally:
            self.seconds += time.perf_counter() - t0
        if rec.get("dir"):
            (Path(rec["dir"]) / RUN_ID_FILE).write_text(run_id)
        self.n_recorded += 1
        return run_id

    def log_parent_params(self, params: Dict[str, str]) -> None:
        """Params of the parent run (at most 100, values cut to MLflow's 6,000 characters)."""
        if not self.ok:
            return
        try:
            from mlflow.entities import Param

            self.client.log_batch(
                self.parent, params=[Param(k, str(v)[:6000]) for k, v in list(params.items())[:100]]
            )
        except Exception as e:
            self.error = short_error(e)

    def finish(
        self,
        status: str = "FINISHED",
        metrics: Optional[Dict[str, float]] = None,
        artifacts: Iterable[str] = (),
        tags: Optional[Dict[str, str]] = None,
    ) -> bool:
        """Summary metrics, tags and files (paths, or (path, artifact dir)) on the parent run,
        then end it. Whether all of it reached the tracker."""
        if not self.ok or not self.parent:
            return False
        try:
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            if metrics or tags:
                self.client.log_batch(
                    self.parent,
                    metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                    tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()],
                )
            for a in artifacts:
                path, sub = a if isinstance(a, tuple) else (a, None)
                self.client.log_artifact(self.parent, str(path), sub)
            self.client.set_terminated(self.parent, status=status)
        except Exception as e:
            self.error = short_error(e)
            return False
        return True
