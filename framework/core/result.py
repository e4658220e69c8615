"""`Result`: what evaluating one design gives, for every mode (static, speculative, batch fill,
serving, CoE): a status (`ok`, `infeasible`, `invalid`, or `error` for a crash a sweep caught),
the reason when not ok, flat float metrics, notes, and the arrays a mode keeps for files (the
kernel's step rows and their times by cause; a serving run's per-request and per-step arrays).

A Result reads like its JSON record too (`r["metrics"]` is `r.metrics`), so code that handles
results and stored `result.json` records alike needs no second path. `config_hash` is the key
on which sweeps resume; it includes the code version, so a stored result is never reused by a
different version of the model."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

import decodelab.components
from decodelab import paths
from decodelab.version import __version__

STATUSES = ("ok", "infeasible", "invalid", "error")

# Config keys that do not change a design's result: left out of its hash.
NOT_DESIGN = ("tracking", "quiet", "claim")


@dataclass
class Result:
    status: str
    reason: str = ""
    metrics: Dict[str, float] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    steps: Optional[np.ndarray] = None  # kernel rows (core.kernel S_* columns)
    times: Optional[np.ndarray] = None  # seconds of each row by cause (core.kernel.CAUSES)
    serving: Optional[Dict[str, Any]] = None  # serving runs: requests, steps, KV bytes per token
    timings: Dict[str, float] = field(default_factory=dict)  # seconds spent per phase (profiling)

    @classmethod
    def invalid(cls, reason: str) -> "Result":
        return cls("invalid", reason)

    @classmethod
    def infeasible(cls, reason: str) -> "Result":
        return cls("infeasible", reason)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    # read like the JSON record (and like the dicts older code and users' scripts handle)
    def __getitem__(self, key: str):
        if key in _FIELDS and (key not in _OPTIONAL or getattr(self, key) is not None):
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: str) -> bool:
        return key in _FIELDS and (key not in _OPTIONAL or getattr(self, key) is not None)

    def get(self, key: str, default=None):
        return self[key] if key in self else default

    def record(self, cfg_dict: Dict[str, Any]) -> Dict[str, Any]:
        """The JSON-serialisable record of this result (result.json): everything but arrays."""
        return {
            "status": self.status,
            "reason": self.reason,
            "notes": list(self.notes),
            "metrics": dict(self.metrics),
            "config": cfg_dict,
            "config_hash": config_hash(cfg_dict),
            "code_version": code_version(),
        }


_FIELDS = ("status", "reason", "metrics", "notes", "steps", "times", "serving", "timings")
_OPTIONAL = ("steps", "times", "serving")


def code_version() -> str:
    """The package version plus a hash of the model code (every module that can change a
    number: framework/core, framework/modes and components/), so results from other code are
    never taken for this code's."""
    return _CODE_VERSION[0] or _compute_code_version()


_CODE_VERSION = [""]


def _compute_code_version() -> str:
    digest = hashlib.sha1()
    roots = [
        paths.PACKAGE_DIR / "core",
        paths.PACKAGE_DIR / "modes",
        Path(decodelab.components.__file__).parent,
    ]
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            digest.update(f.relative_to(root).as_posix().encode())
            digest.update(f.read_bytes())
    _CODE_VERSION[0] = f"{__version__}+{digest.hexdigest()[:12]}"
    return _CODE_VERSION[0]


def config_hash(cfg_dict: Dict[str, Any]) -> str:
    """A stable hash of a resolved design (everything but where and how it is recorded) and of
    the code version: the key on which re-running a sweep skips designs already recorded."""
    design = {k: v for k, v in cfg_dict.items() if k not in NOT_DESIGN}
    text = json.dumps(design, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256((code_version() + text).encode()).hexdigest()[:20]
