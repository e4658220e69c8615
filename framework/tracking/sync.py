"""`decodelab sync [DIR ...] [tracking.uri=... tracking.experiment=...]`: upload the results that
did not reach the tracker (the server was down, the sweep was interrupted before recording).

Every job of `decodelab`, `decodelab -m` and `decodelab sweep` writes `result.json` in its own
directory, and a `mlflow_run_id` file beside it once its MLflow run exists. Sync walks DIRs
(default: outputs/), takes every result.json without that marker and logs it exactly as the
Hydra callback would (framework/tracking/store.py), to the tracker named in the result's own config
unless `tracking.*` overrides are given, then writes the marker. Results of one sweep directory
go under that sweep's parent run (created now if the tracker never saw it). A parent its sweep
left RUNNING (killed) ends FINISHED only if the sweep reached its end, else KILLED; a KILLED
parent (an interrupted sweep) stays KILLED.

Idempotent: a marked result is never sent again, and a result whose config hash is already in a
finished run of the experiment is only marked (so a crash between logging and marking does not
double it). A run left unfinished by a tracker that died mid-write (same hash, status RUNNING)
is deleted and replaced.
"""

from __future__ import annotations

from contextlib import contextmanager
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from decodelab.core.labels import run_label
from decodelab.tracking.store import RUN_ID_FILE
from decodelab.core.schema import TrackingConfig
from decodelab.tracking.recorder import Params, Recorder, short_error
from decodelab.tracking.sqlite import StoreError, store_lock
from decodelab.tracking.store import runs_by_hash

# MLflow's own copies of logged files (a local artifact store under outputs/): never results
ARTIFACT_DIRS = {"mlartifacts", "mlruns"}
# what a job logs as artifacts (report.write_outputs, serving_report.write_serving, app)
FILES = (
    "result.json",
    "steps.csv",
    "breakdown.png",
    "config_resolved.yaml",
    "requests.csv",
    "timeline.csv",
    "latency.png",
    "timeline.png",
)


@dataclass
class SyncReport:
    uploaded: int = 0
    already: int = 0  # marked now: the tracker had them (same config hash)
    replaced_partial: int = 0
    skipped_disabled: int = 0
    failed: int = 0
    errors: List[str] = field(default_factory=list)  # tracker problems
    bad: List[str] = field(default_factory=list)  # result.json files that are not results (skipped)


def pending(dirs: List[Path]) -> List[Path]:
    """result.json files under dirs without a mlflow_run_id marker beside them."""
    out = []
    for d in dirs:
        files = [d] if d.is_file() else sorted(d.rglob("result.json"))
        out.extend(
            f
            for f in files
            if not (f.parent / RUN_ID_FILE).exists() and not (set(f.parts[:-1]) & ARTIFACT_DIRS)
        )
    return out


def record_problem(rec) -> Optional[str]:
    """Why a loaded result.json is not a decodelab result record (None if it is one)."""
    if not isinstance(rec, dict):
        return f"holds a JSON {type(rec).__name__}, not a result record (an object)"
    for key, kind in (("status", str), ("reason", str), ("metrics", dict), ("config", dict)):
        if not isinstance(rec.get(key), kind):
            return f"field {key!r} is missing or not a {kind.__name__}"
    if not isinstance(rec.get("notes", []), list):
        return "field 'notes' is not a list"
    for k, v in rec["metrics"].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"metric {k!r} is {v!r}, not a number"
    if not isinstance(rec["config"].get("tracking", {}), dict):
        return "field 'config.tracking' is not an object"
    return None


def sweep_dir_of(result: Path) -> Optional[Path]:
    """The sweep directory of a job of a multirun / fast sweep; None for a single run."""
    d = result.parent.parent
    if any((d / n).exists() for n in ("multirun.yaml", "sweep.json", "mlflow_parent_run_id")):
        return d
    return None


def sweep_ended(sweep_dir: Path) -> bool:
    """Whether a sweep directory's sweep reached its end: its results table was closed (a sweep
    killed before leaves none) and, for `decodelab sweep`, every job of its plan has a result."""
    if not (sweep_dir / "results.parquet").is_file():
        return False
    try:
        n_jobs = int(json.loads((sweep_dir / "sweep.json").read_text())["n_jobs"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # a `decodelab -m` multirun: its table is written once all jobs ran
    return sum(1 for _ in sweep_dir.glob("*/result.json")) >= n_jobs


def _label(record: dict, result: Path) -> str:
    from omegaconf import OmegaConf

    try:
        return run_label(OmegaConf.create(record["config"]), record.get("metrics"))
    except Exception:
        return f"{result.parent.parent.name}/{result.parent.name}"


def _tracking(record: dict, overrides: Dict) -> Dict:
    from dataclasses import asdict

    return {**asdict(TrackingConfig()), **record.get("config", {}).get("tracking", {}), **overrides}


def sync(
    dirs: List[Path], overrides: Optional[Dict] = None, dedupe: bool = True, params: Optional[Params] = None
) -> SyncReport:
    """Upload the unmarked results under dirs. `dedupe=False` (a single run recording itself
    in the background) uploads even when the same design is already in the tracker: each
    single run is its own MLflow run, as when it records in the foreground. `params`: how a
    design's config becomes its MLflow params (decodelab.output.flat.flat_params)."""
    rep = SyncReport()
    groups: Dict[Tuple, List[Tuple[Path, dict]]] = {}
    for f in pending(dirs):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            rep.bad.append(
                f"{f}: unreadable ({str(e).splitlines()[0]}); skipped (re-run that job or remove it)"
            )
            continue
        problem = record_problem(rec)
        if problem:
            rep.bad.append(f"{f}: {problem}; skipped (re-run that job or remove it)")
            continue
        tr = _tracking(rec, overrides or {})
        if not tr.get("enabled", True):
            rep.skipped_disabled += 1
            continue
        key = (tr["uri"], tr["experiment"], str(sweep_dir_of(f) or ""))
        groups.setdefault(key, []).append((f, {**rec, "_tracking": tr}))
    recorded: Dict[Tuple[str, str], Dict[str, str]] = {}
    for (uri, exp, sweep), items in groups.items():
        try:
            with _store_lock(uri):
                # another sync (a single run's background one) may have uploaded some meanwhile
                items = [(f, rec) for f, rec in items if not (f.parent / RUN_ID_FILE).exists()]
                if items:
                    _sync_group(uri, exp, sweep, items, recorded, dedupe, rep, params)
        except StoreError as e:  # the store's lock held too long: these wait for the next sync
            rep.failed += len(items)
            rep.errors.append(f"{uri} ({exp}): {short_error(e)}; {len(items)} results still to upload")
    return rep


@contextmanager
def _store_lock(uri: str):
    """One sync at a time writes a SQLite store, under the store's one lock (tracking/sqlite.py,
    the lock its creation takes too): a user's sync and a single run's background one never both
    upload, or create the store, at once; a lock held too long is one StoreError line. Tracking
    servers order their own writes."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    with store_lock(Path(uri[len("sqlite:///") :])):
        yield


def _sync_group(
    uri: str, exp: str, sweep: str, items, recorded, dedupe: bool, rep: SyncReport, params=None
) -> None:
    """Upload one (tracker, experiment, sweep) group's results into `rep`."""
    tr = items[0][1]["_tracking"]
    sweep_dir = Path(sweep) if sweep else None
    name = f"sync {sweep_dir.name}" if sweep_dir else None
    r = Recorder(tr, sweep_dir, name, {"kind": "sync"}, params=params)
    # without dedupe (a single run recording itself) neither the experiment's hashes are
    # needed nor may RUNNING runs of the same design be deleted: another process may be
    # writing one of them right now
    if dedupe and (uri, exp) not in recorded:
        recorded[(uri, exp)] = r.recorded_hashes()
    done = recorded.get((uri, exp), {})
    partial = _partial_runs(r) if r.ok and dedupe else {}
    for f, rec in items:
        if not r.ok:
            break
        h = rec.get("config_hash")
        if dedupe and h and h in done:
            (f.parent / RUN_ID_FILE).write_text(done[h])
            rep.already += 1
            continue
        try:
            for run_id in partial.pop(h, ()):
                r.client.delete_run(run_id)
                rep.replaced_partial += 1
        except Exception as e:  # the tracker went away: stop, as Recorder.record does
            r.error = short_error(e)
            break
        rec.update(name=_label(rec, f), dir=str(f.parent))
        run_id = r.record(rec, [str(f.parent / n) for n in FILES if (f.parent / n).is_file()])
        if run_id:
            rep.uploaded += 1
            if h:
                done[h] = run_id
    if sweep_dir is not None and r.parent_status is None:
        r.finish()  # a parent made now
    elif sweep_dir is not None and r.parent_status == "RUNNING":  # its sweep died before its end
        r.finish("FINISHED" if sweep_ended(sweep_dir) else "KILLED")
    # a KILLED or FAILED parent keeps its status
    if not r.ok:
        left = sum(1 for f, _ in items if not (f.parent / RUN_ID_FILE).exists())
        rep.failed += left
        rep.errors.append(f"{uri} ({exp}): {r.error}; {left} results still to upload")


def _partial_runs(r) -> Dict[str, List[str]]:
    """{config hash: run ids} of runs a dead tracker left unfinished."""
    try:
        return runs_by_hash(r.client, r.exp, "RUNNING")
    except Exception:
        return {}


def tracking_keys() -> List[str]:
    from dataclasses import fields

    return [f.name for f in fields(TrackingConfig)]


def tracking_override_errors(over: Dict) -> List[str]:
    """The `tracking...` overrides of a command line that are not tracking.KEY=VALUE with a
    known KEY (`tracking=off` would otherwise be a TypeError)."""
    tr = over.get("tracking", {})
    if not isinstance(tr, dict):
        return [f"tracking={tr}"]
    return [f"tracking.{k}" for k in tr if k not in tracking_keys()]
