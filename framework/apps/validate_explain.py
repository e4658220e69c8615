"""decodelab validate --explain ROW: one row of the CSV run as validate runs it, printed with where
its time went (runs/validation_explain.py): its setting and launch, measured vs predicted TTFT,
TPOT and output rate, TTFT's percentiles and queues, the mean request's decode time per output
token by cause, the steps' batch and KV, a disaggregated row's pools, and the simulation's notes;
each candidate launch of the row on its own. --out DIR also writes them as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from decodelab.apps.validate_tables import console
from decodelab.runs import validation_explain as X

# the record's columns shown as the row's setting, where present
SETTING = (
    "model",
    "system",
    "mode",
    "engine",
    "engine_version",
    "precision",
    "tp",
    "concurrency",
    "isl",
    "osl",
)
LAUNCH = ("engine_config", "launch", "recipe", "candidate", "ttft_note")


def _num(v: float, unit: str) -> str:
    if unit == "%":
        return f"{v:.1f}%"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}"


def _present(rec: dict, keys) -> List[str]:
    out = []
    for k in keys:
        v = rec.get(k)
        if v is None or (isinstance(v, float) and v != v) or v == "":
            continue
        out.append(f"{k}={int(v) if isinstance(v, float) and v.is_integer() else v}")
    return out


def print_one(got: dict) -> None:
    """One run of the row: its setting, the comparison, the parts and the notes."""
    from rich.table import Table

    con = console()
    rec = got["record"]
    con.print(f"row {rec.get('row')}  " + "  ".join(_present(rec, ("id",))))
    for keys in (SETTING, LAUNCH):
        if _present(rec, keys):
            con.print("  " + "  ".join(_present(rec, keys)))
    if rec.get("config"):  # the design's overrides, before the row's workload and engine values
        con.print(f"  config: {rec['config']}")
    if rec["status"] != "ok":
        con.print(f"  {rec['status']}: {rec['reason']}")
        return
    t = Table(show_edge=False)
    for c in ("", "measured", "predicted", "error"):
        t.add_column(c, justify="right" if c else "left")
    for k, unit in (("ttft", "ms"), ("tpot", "ms"), ("tput", "tok/s")):
        t.add_row(
            f"{k.upper()} {unit}",
            f"{rec[f'{k}_meas']:.2f}",
            f"{rec[f'{k}_pred']:.2f}",
            f"{rec[f'{k}_err_pct']:+.1f}%",
        )
    con.print(t)
    titles = {
        "ttft": "TTFT (predicted)",
        "tpot": "TPOT by cause (predicted, ms per output token of the mean request)",
        "steps": "engine steps",
        "pools": "disaggregated pools",
    }
    for section, rows in got["parts"].items():
        if rows:
            con.print(f"  {titles[section]}: " + ", ".join(f"{lab} {_num(v, u)}" for lab, v, u in rows))
    for n in got["notes"]:
        con.print(f"  note: {n}")


def run(csv: Path, ident: str, overrides: List[str], static: bool, launch: str, out) -> int:
    """Explain the row `ident` of `csv`; ValueError (one line) for a row or config that is wrong."""
    ckpt = next(
        (o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("model.fp8_checkpoint=")), None
    )
    items = X.select(csv, ident, static, ckpt)
    runs = X.explain(items, overrides, static, launch)
    for got in runs:
        print_one(got)
    if out:
        path = Path(out).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(ident))
        target = path / f"{csv.stem}_explain_{safe}.json"
        target.write_text(json.dumps(runs, indent=1, default=str) + "\n")
        print(f"wrote {target}")
    return 0
