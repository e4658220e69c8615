"""Calibrate one placeholder parameter on one published figure, then let every other figure test it.

  decodelab calibrate sn40l.launch_us --on C9:3            find, print and record the value
  decodelab calibrate sn40l.launch_us --on C9:3 --dry-run  print the YAML lines, change nothing
  decodelab calibrate --list                               the parameters, ranges and calibrations
  decodelab calibrate --table                              the full table (docs/claims.md, "Placeholders and
                                                           calibrated parameters", shows part of it)

PARAM is an entry of data/calibration.yaml (its name, or its config key when one entry has it);
FIGURE a claim figure: `ID` for a claim of one figure, else `ID:N` (N from 1, as `decodelab
claims` lists them). The value is searched inside the parameter's stated range (brentq on a sign
change, else the closest value; decodelab.runs.calibrate). Recording it rewrites the value's line in
its YAML (comments kept) and adds `calibrated_on: {figure, value, date}` to the entry; from then on
`decodelab claims` reports that figure as `calibration`, not counted in the pass rate. A parameter
is calibrated on at most one figure: a second is refused."""

from __future__ import annotations

import datetime
import sys
from typing import List

from decodelab.apps.common import errors, run_module
from decodelab.errors import ConfigError
from decodelab.runs.calibrate import calibrate
from decodelab.runs.placeholders import REGISTRY, apply_edits, load_params, markdown_table


def add_arguments(p) -> None:
    p.add_argument("param", nargs="?", metavar="PARAM", help="a parameter of data/calibration.yaml")
    p.add_argument("--on", metavar="FIGURE", help="the claim figure to calibrate on: ID or ID:N")
    p.add_argument("--dry-run", action="store_true", help="print the YAML lines to change, write nothing")
    p.add_argument("--list", action="store_true", help="list the parameters, their ranges and calibrations")
    p.add_argument("--table", action="store_true", help="the calibration table as Markdown (docs/claims.md)")


def _list() -> int:
    for p in load_params().values():
        cal = p.calibrated_on
        on = (
            f"calibrated on {cal['figure']} = {cal['value']} ({cal.get('date', '')})"
            if cal
            else "placeholder"
        )
        print(f"{p.name:28s} {p.key:58s} [{p.lo:g}, {p.hi:g}]  {on}")
    return 0


def run(a) -> int:
    if a.list:
        return _list()
    if a.table:
        print(markdown_table(load_params()))
        return 0
    if not a.param or not a.on:
        return errors("give PARAM and --on FIGURE (decodelab calibrate --list names the parameters)")
    try:
        c = calibrate(a.param, a.on, datetime.date.today().isoformat())
    except ConfigError as e:
        return errors(str(e))
    pub = c["published"]
    print(f"{c['param']} ({c['key']}) on {c['figure']} ({c['name']}), published {pub}")
    print(f"  range [{c['range'][0]:g}, {c['range'][1]:g}]; point {c['point']} gives {c['before']:.4g}")
    if c["how"] == "closest":
        print(f"  no value in the range reaches {c['target']:.4g}: the closest is {c['value']}")
    print(f"  calibrated value {c['value']} gives {c['after']:.4g} (target {c['target']:.4g})")
    lines = [f"  {f}:{n}\n    - {old.strip()}\n    + {new.strip()}" for f, n, old, new in c["edits"]]
    lines.append(f"  {REGISTRY}: after line {c['registry'][0]}\n    + {c['registry'][1].strip()}")
    if a.dry_run:
        print("dry run, nothing written; the lines:\n" + "\n".join(lines))
        return 0
    apply_edits(c["edits"], c["registry"])
    print("written:\n" + "\n".join(lines))
    print("then: python tests/numbers_snapshot.py --write, and say in the commit what moved")
    return 0


def main(argv: List[str]) -> int:
    return run_module("calibrate", sys.modules[__name__], argv)
