"""Upload results that did not reach the tracker (idempotent: a design already recorded is only
marked). Every run directory under DIR (default outputs/) whose result.json has no MLflow run id
next to it is uploaded, with its files, into the tracker its own config names (or the one given).

  decodelab sync
  decodelab sync outputs/multirun/2026-11-24 tracking.uri=http://127.0.0.1:5000"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from decodelab.apps.common import run_module
from decodelab.output.flat import flat_params
from decodelab.tracking.sync import sync, tracking_keys, tracking_override_errors


def add_arguments(ap) -> None:
    ap.add_argument(
        "args",
        nargs="*",
        metavar="DIR | tracking.KEY=VALUE",
        help="directories (default: outputs) and tracking overrides",
    )
    ap.add_argument(
        "--each",
        action="store_true",
        help="upload every unmarked result even if "
        "the same design is already recorded (no config-hash dedupe, and unfinished "
        "runs of the same design are left alone)",
    )


def run(a) -> int:
    from omegaconf import OmegaConf

    dirs = [Path(x) for x in a.args if "=" not in x] or [Path("outputs")]
    over = OmegaConf.to_container(OmegaConf.from_dotlist([x for x in a.args if "=" in x]))
    bad = [k for k in over if k != "tracking"] or tracking_override_errors(over)
    if bad or any(not d.exists() for d in dirs):
        what = ", ".join(bad) if bad else ", ".join(str(d) for d in dirs if not d.exists())
        print(
            f"error: {what}: give directories (or result.json files) that exist and "
            f"tracking.KEY=VALUE overrides, KEY one of {', '.join(tracking_keys())}",
            file=sys.stderr,
        )
        return 2
    rep = sync(dirs, over.get("tracking", {}), dedupe=not a.each, params=flat_params)
    print(
        f"sync: {rep.uploaded} uploaded, {rep.already} already in the tracker (marked), "
        f"{rep.replaced_partial} unfinished runs replaced, {rep.skipped_disabled} with tracking "
        f"disabled left alone, {rep.failed} not uploaded, {len(rep.bad)} not results"
    )
    for e in rep.errors:
        print(f"warning: {e}")
    for e in rep.bad:  # bad input: one line per file, the rest was uploaded
        print(f"error: {e}", file=sys.stderr)
    return 2 if rep.bad else 1 if rep.failed else 0


def main(argv: List[str]) -> int:
    return run_module("sync", sys.modules[__name__], argv)
