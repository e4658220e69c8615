"""Hydra callback that records every job in MLflow: a single run as one MLflow run; a multirun as
one parent run with a nested child run per job. Jobs never touch MLflow: they return their
record and the files they wrote, and `on_job_end` (which runs in the job's own process, also
under the joblib launcher) logs them. If the tracker is unreachable the job's result.json stays
on disk without a `mlflow_run_id` file next to it, so nothing is lost."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from framework import tracking

log = logging.getLogger(__name__)
PARENT_FILE = "mlflow_parent_run_id"
RUN_ID_FILE = "mlflow_run_id"


class MLflowCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.tracking.enabled:
            self._safe(tracking.experiment_id, config.tracking)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Create the store and the parent run once, before any (parallel) job starts:
        # concurrent first-time creation of a SQLite store corrupts it.
        if not config.tracking.enabled:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = " ".join(config.hydra.overrides.task)
        run_id = self._safe(tracking.start_run, config.tracking, f"sweep {sweep_dir.name}",
                            {"sweep": "true", "sweep_dir": str(sweep_dir),
                             "overrides": overrides[:5000], "git_commit": tracking.git_commit()})
        if run_id:
            (sweep_dir / PARENT_FILE).write_text(run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.tracking.enabled:
            return
        f = Path(config.hydra.sweep.dir) / PARENT_FILE
        if f.exists():
            self._safe(tracking.end_run, config.tracking, f.read_text().strip())

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not config.tracking.enabled or job_return is None:
            return
        ret = job_return._return_value
        if not isinstance(ret, dict) or "record" not in ret:
            return          # the job raised: Hydra reports it
        parent = None
        hc = HydraConfig.get()
        if str(hc.mode) == "RunMode.MULTIRUN":
            f = Path(hc.sweep.dir) / PARENT_FILE
            parent = f.read_text().strip() if f.exists() else None
        run_id = self._safe(tracking.log_result, config.tracking, ret["record"], ret["name"],
                            ret["files"].values(), parent)
        if run_id:
            (Path(hc.runtime.output_dir) / RUN_ID_FILE).write_text(run_id)

    @staticmethod
    def _safe(fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # the tracker must never lose or crash a result
            log.warning("MLflow tracking failed (%s: %s); the result stays in the output "
                        "directory", type(e).__name__, str(e).splitlines()[0][:300])
            return None
