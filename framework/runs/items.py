"""Evaluating the jobs of a sweep plan in a worker process: each job's config (composed by
decodelab.config.plan), its Result, its files under the sweep directory, its record. Never raises
for a design: a config that does not compose is `invalid`, a crash is `error` with its traceback
in the job's directory."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from decodelab.config import plan
from decodelab.core import kernel as K
from decodelab.core.labels import run_label
from decodelab.core.result import Result, config_hash
from decodelab.modes.dispatch import evaluate
from decodelab.output.files import write_outputs


class Chunk(list):
    """Jobs (index, overrides) of one choice of config groups, with what the planning process
    knows of them: the override keys that name groups and the choice's composed config
    (pickled, config.derive; None: the worker composes it)."""

    def __init__(self, items=(), known: Optional[Dict[str, bool]] = None, groups=(), base=None) -> None:
        super().__init__(items)
        self.known, self.groups, self.base = dict(known or {}), tuple(groups), base


def warm_up() -> int:
    """What a worker pays once, paid while the planning process still composes (a local
    backend starts its workers first, runs.backends): this module's imports, Numba's start and
    a kernel every design uses loaded from its cache. Returns the worker's process id."""
    K.apply_caps(K.request_steps(1, 1, 2), 1.0, K.NO_CAPS)
    return os.getpid()


def composer_for(source: plan.Source, items) -> plan.Composer:
    """The process's composer of `source`, told what the chunk carries (Chunk)."""
    composer = plan.composer(source)
    if isinstance(items, Chunk):
        composer.adopt(items.known, items.groups, items.base)
    return composer


def run(cfg, error: Optional[str], keep_steps: bool = False) -> Result:
    """evaluate(cfg) as a result dict, also for a config that could not be built; never raises."""
    if cfg is None:
        return Result.invalid(error)
    try:
        return evaluate(cfg, keep_steps=keep_steps)
    except Exception as e:  # a bug, not a design problem: recorded, the sweep goes on
        return Result(
            "error", f"{type(e).__name__}: {e}".splitlines()[0], timings={}, notes=[traceback.format_exc()]
        )


def evaluate_items(
    source: plan.Source,
    items: List[Tuple[int, List[str]]],
    sweep_dir: str,
    recorded: Dict[str, str],
    plots: bool = False,
) -> List[dict]:
    """Evaluate jobs (index, overrides) and write each one's files under sweep_dir/<index>/.
    Returns their records (report.result_record + index, name, dir, overrides, files) or, for a
    design already recorded (same config hash), {index, skipped: run id, config_hash,
    overrides, config, name}."""
    composer = composer_for(source, items)
    out = []
    for index, job in items:
        cfg, cfg_dict, name, error = plan.prepare(composer, job)
        h = config_hash(cfg_dict)
        if h in recorded:  # the calling process writes its record (decodelab.runs.resume)
            out.append(
                {
                    "index": index,
                    "skipped": recorded[h],
                    "config_hash": h,
                    "overrides": list(job),
                    "config": cfg_dict,
                    "name": name,
                }
            )
            continue
        res = run(cfg, error, keep_steps=plots)
        if cfg is not None and res.status == "ok":
            name = run_label(cfg, res.metrics)  # batch_fill: the batch simulated
        d = Path(sweep_dir) / str(index)
        files = write_outputs(cfg_dict, res, d, name, plots=plots, step_csv=plots, key=h)
        if res.status == "error":
            (d / "traceback.txt").write_text(res.notes[0])
            res.notes = []
        rec = res.record(cfg_dict, h)
        rec.update(index=index, name=name, dir=str(d), overrides=list(job), files=list(files.values()))
        out.append(rec)
    return out
