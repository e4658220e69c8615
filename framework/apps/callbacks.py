"""Hydra callback that records every job in MLflow: a single run as one MLflow run; a multirun as
one parent run with a nested child run per job. Jobs never touch MLflow: they return their
record and the files they wrote, and `on_job_end` (which runs in the job's own process, also
under the joblib launcher) logs them. If the tracker is unreachable the job's result.json stays
on disk without a `mlflow_run_id` file next to it, so nothing is lost.

A single run with `tracking.background` (auto: when stdout is a terminal) is recorded by a
detached `decodelab sync <run dir>/result.json --each` process instead, so the command returns without loading
MLflow; its output goes to `sync.log` in the run directory, and until it has run the result is
simply unsynced (a later `decodelab sync` uploads it)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from decodelab.core.result import config_hash
from decodelab.output.files import where_lines
from decodelab.output.flat import flat_params
from decodelab.output.table import TABLE_FILE, table_row, write_table
from decodelab.tracking.recorder import log_record
from decodelab.runs.summary import plots as sweep_plots
from decodelab.tracking import store as tracking
from decodelab.tracking.store import PARENT_FILE, RECORDED_FILE, RUN_ID_FILE

log = logging.getLogger(__name__)


def background(tracking) -> bool:
    """Whether a single run records through a detached sync process (auto: stdout a terminal)."""
    flag = tracking.get("background", None)
    return sys.stdout.isatty() if flag is None else bool(flag)


def record_in_background(run_dir: Path, cwd: str) -> None:
    """Start `decodelab sync RUN_DIR/result.json --each` detached (own session: it outlives this
    process) in cwd, where relative SQLite URIs and artifact roots resolve as in the foreground.
    Only this run's result.json: a run dir shared with other results (hydra.run.dir=...) must
    not have them all uploaded without dedupe. Sync locks a SQLite store while it writes, so
    concurrent background writers never create it twice."""
    with open(Path(run_dir) / "sync.log", "ab") as log_file:
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "decodelab.apps.cli",
                "sync",
                str(Path(run_dir) / "result.json"),
                "--each",
            ],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextmanager
def _in_dir(path: str):
    """cwd = path for the block: a job with hydra.job.chdir=true records from the directory
    decodelab was started in, where on_run_start / on_multirun_start made the store."""
    old = os.getcwd()
    try:
        os.chdir(path)
    except OSError:  # a launcher's node without that directory: stay
        pass
    try:
        yield
    finally:
        os.chdir(old)


def recorded_run(cfg: DictConfig, sweep_dir: Path) -> Optional[str]:
    """The MLflow run that already holds this design (same config hash), if the sweep resumes."""
    cwd = Path(HydraConfig.get().runtime.cwd)  # a relative sweep dir, under hydra.job.chdir
    f = (cwd / sweep_dir if cwd.is_dir() else sweep_dir) / RECORDED_FILE
    if not (cfg.tracking.enabled and cfg.tracking.get("resume", True) and f.is_file()):
        return None
    from omegaconf import OmegaConf

    return json.loads(f.read_text()).get(config_hash(OmegaConf.to_container(cfg, resolve=True)))


def multirun_table(sweep_dir: Path) -> Optional[Path]:
    """results.parquet of a multirun: one row per job's result.json (job = its directory)."""
    rows = []
    if not sweep_dir.is_dir():
        return None
    for d in sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        f = d / "result.json"
        if f.is_file():
            rec = json.loads(f.read_text())
            rows.append(table_row(rec, job=int(d.name), reused_from=rec.get("reused_from") or "", dir=str(d)))
    return write_table(sweep_dir / TABLE_FILE, rows) if rows else None


def _log_artifact(tr, run_id: str, path: Path) -> None:
    tracking._client(tr.uri).log_artifact(run_id, str(path))


def _link(tr, record, origin: str, parent: Optional[str]) -> str:
    return tracking.log_link(tracking._client(tr.uri), tracking.experiment_id(tr), record, origin, parent)


def _records(sweep_dir: Path):
    """The result records of a multirun's jobs (<sweep dir>/<job>/result.json); unreadable ones
    are left out (decodelab sync names them)."""
    for path in sorted(sweep_dir.glob("*/result.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("metrics", {}), dict):
            yield rec


SWEEP_SYNTAX = ("range(", "choice(", "interval(", "glob(", "sort(", "shuffle(", "tag(")


def swept_keys(config: DictConfig) -> List[str]:
    """The keys a multirun sweeps: a sweep file's `hydra.sweeper.params` and the command line's
    `key=a,b` / `key=range(...)` overrides."""
    keys = list((config.hydra.sweeper.get("params") or {}).keys())
    for o in config.hydra.overrides.task:
        k, _, v = o.partition("=")
        if ("," in v and not v.startswith(("[", "{"))) or v.startswith(SWEEP_SYNTAX):
            keys.append(k.lstrip("+~"))
    return list(dict.fromkeys(keys))


def multirun_name(config: DictConfig) -> str:
    """A multirun's parent run name: its sweep file (config name) and the keys it sweeps."""
    name = str(config.hydra.job.config_name or "config")
    keys = ", ".join(k.rsplit(".", 1)[-1] for k in swept_keys(config)) or "no swept keys"
    return f"sweep {name}: {keys}" if name != "config" else f"sweep {keys}"


def multirun_metrics(records: List[dict]) -> Dict[str, float]:
    """The parent's summary: n_<status>, n_designs, best_<metric> (tracking.sweep_metrics) and
    median_<metric> over the ok designs."""
    import statistics

    out = tracking.sweep_metrics(records)
    ok = [r["metrics"] for r in records if r.get("status") == "ok"]
    for key in tracking.BEST:
        vals = [float(m[key]) for m in ok if isinstance(m.get(key), (int, float))]
        if vals:
            out[f"median_{key}"] = statistics.median(vals)
    return out


def _plots(config: DictConfig, sweep_dir: Path, records: List[dict], table: Optional[Path]) -> List[Path]:
    """pareto.png and <metric>_vs_<param>.png in the sweep directory, as `decodelab sweep` has."""
    plan = SimpleNamespace(sweep_dir=sweep_dir, name=sweep_dir.name, varied=swept_keys(config))
    return sweep_plots(plan, SimpleNamespace(records=records, table=table))


class MLflowCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.tracking.enabled and not background(config.tracking):
            self._safe(tracking.experiment_id, config.tracking)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Create the store and the parent run once, before any (parallel) job starts:
        # concurrent first-time creation of a SQLite store corrupts it.
        if not config.tracking.enabled:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = " ".join(config.hydra.overrides.task)
        run_id = self._safe(
            tracking.start_run,
            config.tracking,
            multirun_name(config),
            {
                "sweep": "true",
                "sweep_dir": str(sweep_dir),
                "overrides": overrides[:5000],
                "mlflow.source.git.commit": tracking.git_commit(),
            },
        )
        if run_id:
            (sweep_dir / PARENT_FILE).write_text(run_id)
        recorded = sweep_dir / RECORDED_FILE
        # designs already recorded (by config hash), read by each job: resuming a sweep. A file
        # left by an earlier run in this sweep dir (another experiment or store) must not stay.
        done = (
            self._safe(tracking.recorded_hashes, config.tracking)
            if config.tracking.get("resume", True)
            else None
        )
        if done:
            recorded.write_text(json.dumps(done))
        elif recorded.exists():
            recorded.unlink()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            table = multirun_table(sweep_dir)
        except Exception as e:  # the results stay in each job's result.json
            log.warning("results.parquet not written (%s: %s)", type(e).__name__, str(e)[:300])
            table = None
        f = sweep_dir / PARENT_FILE
        parent = f.read_text().strip() if f.exists() and config.tracking.enabled else None
        if parent:
            records = list(_records(sweep_dir))
            plots = self._safe(_plots, config, sweep_dir, records, table) or []
            for path in [table, *plots]:
                if path:
                    self._safe(_log_artifact, config.tracking, parent, path)
            self._safe(tracking.end_run, config.tracking, parent, "FINISHED", multirun_metrics(records))
        print(*where_lines(sweep_dir, config.tracking, parent, table), sep="\n")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not config.tracking.enabled or job_return is None:
            return
        ret = job_return._return_value
        if not isinstance(ret, dict) or "record" not in ret:
            return  # the job raised: Hydra reports it
        parent = None
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)  # absolute
        if str(hc.mode) != "RunMode.MULTIRUN" and background(config.tracking):
            self._safe(record_in_background, out_dir, hc.runtime.cwd)
            return
        with _in_dir(hc.runtime.cwd):
            if str(hc.mode) == "RunMode.MULTIRUN":
                f = Path(hc.sweep.dir) / PARENT_FILE
                parent = f.read_text().strip() if f.exists() else None
            origin = ret["record"].get("reused_from")
            if origin:  # recorded before: a link under this sweep's parent, not a second copy
                run_id = self._safe(
                    _link, config.tracking, {**ret["record"], "name": ret["name"]}, origin, parent
                )
                run_id = run_id or origin
            else:
                run_id = self._safe(
                    log_record,
                    config.tracking,
                    ret["record"],
                    ret["name"],
                    ret["files"].values(),
                    parent,
                    flat_params,
                )
        if run_id:
            (out_dir / RUN_ID_FILE).write_text(run_id)

    _broken: Optional[str] = None  # a store that cannot be used: said once, not tried again

    def _safe(self, fn, *args):
        if self._broken:
            return None
        try:
            return fn(*args)
        except Exception as e:  # the tracker must never lose or crash a result
            text = str(e).splitlines()[0] if str(e).strip() else ""
            if isinstance(e, tracking.StoreError):
                self._broken = text
            log.warning(
                "MLflow tracking failed (%s: %s); the result stays in the output directory",
                type(e).__name__,
                text[:1000],
            )
            return None
