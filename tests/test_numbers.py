"""Numbers do not move unless the model does: every metric of a fixed set of designs, every claim
figure and every `decodelab validate` prediction equals tests/data/numbers.json (written by
`python tests/numbers_snapshot.py --write` after a deliberate model change, whose commit says
why). The restructure of the framework into layers was checked this way."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import numbers_snapshot  # noqa: E402


def test_numbers_unchanged(claim_rows):
    stored = json.loads(numbers_snapshot.FILE.read_text())
    diffs = numbers_snapshot.differences(stored, numbers_snapshot.snapshot(claim_rows))
    assert not diffs, "numbers moved (python tests/numbers_snapshot.py --write if on purpose):\n" + "\n".join(
        diffs[:40]
    )


def test_differences_names_what_moved():
    old = {
        "designs": [{"overrides": ["a=1"], "status": "ok", "reason": "", "metrics": {"x": 1.0}}],
        "claims": [{"id": "C1", "figure": "f", "simulated": 2.0, "pass": True}],
        "validate": [{"ttft_pred": 1.0, "tpot_pred": 2.0}],
    }
    new = json.loads(json.dumps(old))
    assert numbers_snapshot.differences(old, new) == []
    new["designs"][0]["metrics"]["x"] = 1.0 + 1e-6
    new["validate"][0]["tpot_pred"] = 2.5
    d = numbers_snapshot.differences(old, new)
    assert d == ["design a=1: x 1.0 -> 1.000001", "validate row 1: tpot_pred 2.0 -> 2.5"]
