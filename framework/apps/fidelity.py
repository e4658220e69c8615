"""`decodelab fidelity [--ci] [overrides]`: KV-policy accuracy on a real small model
(SmolLM2-135M): passkey retrieval and text, against KV memory saved (docs/fidelity.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from decodelab.apps.common import errors, run_module
from decodelab.config import compose as C
from decodelab.errors import ConfigError
from decodelab.fidelity.report import print_summary, write_files
from decodelab.fidelity.run import run as run_grid, summary
from decodelab.fidelity.weights import ModelUnavailable
from decodelab.tracking.fidelity import log_mlflow


def add_arguments(p) -> None:
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides of conf/fidelity.yaml (policies, budgets, lengths, ...)",
    )
    p.add_argument("--ci", action="store_true", help="the small grid of conf/fidelity_ci.yaml")


def run(a) -> int:
    """Exit 2 on bad input or a missing model."""
    ci, overrides = a.ci, a.overrides
    try:
        cfg = C.compose(overrides, config_name="fidelity_ci" if ci else "fidelity")
    except Exception as e:  # Hydra / OmegaConf: unknown key, wrong type, bad syntax
        msg = " ".join(x.strip() for x in str(e).splitlines() if x.strip() and "hydra.cc" not in x)
        return errors(msg or type(e).__name__)
    try:
        progress = None if cfg.quiet else (lambda s: print(f"[fidelity] {s}", flush=True))
        with C.context():
            res, variants = run_grid(cfg, C.compose_in_context, progress)
    except ConfigError as e:
        return errors(str(e))
    except ModelUnavailable as e:
        return errors(f"model: {e}")
    summ = summary(res)
    out_dir = Path(cfg.out_dir) / cfg.name
    try:
        files = write_files(res, summ, out_dir)
    except OSError as e:  # out_dir not writable, disk full
        return errors(f"out_dir: {e}")
    if not cfg.quiet:
        print_summary(summ, res, cfg)
        print(f"files: {out_dir}")
    if cfg.tracking.enabled:
        try:
            log_mlflow(cfg, res, variants, summ, files)
        except Exception as e:  # never lose the results to a tracker problem
            print(f"warning: fidelity runs not logged to MLflow ({type(e).__name__}: {e})")
    return 0


def main(argv: List[str]) -> int:
    return run_module("fidelity", sys.modules[__name__], argv)
