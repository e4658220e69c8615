"""How much of a row's predicted TTFT is queueing behind other cohorts' prompts after the first wave.

Runs rows of a measured CSV as `decodelab validate` does, keeping each run's per-request table, and
prints per row:
- the measured and predicted TTFT;
- the predicted mean of the first wave (the requests the clients send together at the start);
- the predicted mean after the first wave, and those requests' mean wait before their first step;
- `no_cascade`: the predicted mean if every request after the first wave waited only as long as
  the least-waiting of them, so that none queued behind another cohort's prompt step.

With fixed lengths, the model's clients move in cohorts and each cohort can wait a whole prefill
step behind the one ahead of it (docs/journal/2026-12-02-fixed-length-cohorts.md). A measured TTFT
near `no_cascade` says the measured run did not queue that way.

    python tools/ttft_cascade.py framework/data/validation/h100_qwen3_32b.csv 295 298 301

A row is its 1-based data row number or its `id`, as in `decodelab validate --explain`. A
disaggregated row has no single engine's per-request table: reported and skipped."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from decodelab.apps.common import errors, quiet_on_closed_pipe
from decodelab.config import compose as C
from decodelab.modes.serving.layout import Req
from decodelab.modes.serving.metrics import first_wave
from decodelab.runs import validation_explain as X
from decodelab.runs import validation_predict as P
from rows_file import print_table


def cascade(req: np.ndarray, metrics: dict) -> dict:
    """TTFT parts (ms) of one run: the run's own TTFT metrics (first wave as the serving metrics
    define it, serving.metrics.first_wave) and, from its per-request table (Req columns; times from
    the client's send), the wait after the first wave and the mean with no cascade."""
    sent = req[:, Req.ARRIVAL]
    rest = ~first_wave(sent)
    ttft = (req[:, Req.FIRST] - sent) * 1e3
    wait = (req[:, Req.START] - sent) * 1e3
    out = {
        "predicted": metrics["ttft_ms"],
        "first_wave": metrics.get("ttft_first_wave_ms", np.nan),
        "after": metrics.get("ttft_after_first_wave_ms", np.nan),
    }
    if rest.any():
        no_cascade = ttft.copy()
        no_cascade[rest] = ttft[rest] - wait[rest] + wait[rest].min()
        out.update(after_wait=wait[rest].mean(), no_cascade=no_cascade.mean())
    return out


def row_parts(csv: Path, ident: str) -> dict:
    """The row's measured TTFT and cascade() of its run; ValueError (one line) when it has none."""
    _, key, row = X.select(csv, ident)[0]
    with C.context():
        res = P.row_result({}, key, row, [], set(), False, "auto", keep_steps=True)
    if not res.ok or not res.serving or "requests" not in res.serving:
        raise ValueError(f"row {ident}: no per-request table ({res.status}: {res.reason or 'disaggregated'})")
    return {
        "row": str(ident),
        "clients": int(row["concurrency"]),
        "measured": float(row["ttft_ms"]),
        **cascade(res.serving["requests"], res.metrics),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="a measured-row CSV `decodelab validate --csv` reads")
    ap.add_argument("rows", nargs="+", help="row numbers (1-based) or ids")
    args = ap.parse_args(argv)
    out, skipped = [], []
    for ident in args.rows:
        try:
            out.append(row_parts(Path(args.csv), ident))
        except (OSError, ValueError) as e:
            skipped.append(str(e).strip().splitlines()[0])
    for line in skipped:
        print(f"skipped: {line}", file=sys.stderr)
    if not out:
        return errors("rows: none of the rows ran with a per-request table")
    print_table(pd.DataFrame(out))
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))
