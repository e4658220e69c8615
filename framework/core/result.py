"""`Result`: what evaluating one design gives, for every mode (static, speculative, batch fill,
serving, CoE): a status (`ok`, `infeasible`, `invalid`, or `error` for a crash a sweep caught),
the reason when not ok, flat float metrics, notes, and the arrays a mode keeps for files (the
kernel's step rows and their times by cause; a serving run's per-request and per-step arrays).

A Result reads like its JSON record too (`r["metrics"]` is `r.metrics`), so code that handles
results and stored `result.json` records alike needs no second path. `config_hash` is the key
on which sweeps resume; it includes the code version (code, shipped data and configs) and the
bytes of the files a design names, so a stored result is never reused by a different version of
the model or of its inputs."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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
    steps: Optional[np.ndarray] = None  # kernel rows (kernel_layout.Step columns)
    times: Optional[np.ndarray] = None  # seconds of each row by cause (kernel_layout.CAUSES)
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

    def record(self, cfg_dict: Dict[str, Any], key: Optional[str] = None) -> Dict[str, Any]:
        """The JSON-serialisable record of this result (result.json): everything but arrays.
        `key`: config_hash(cfg_dict), where the caller has it already (a sweep's worker)."""
        return {
            "status": self.status,
            "reason": self.reason,
            "notes": list(self.notes),
            "metrics": dict(self.metrics),
            "config": cfg_dict,
            "config_hash": key or config_hash(cfg_dict),
            "code_version": code_version(),
        }


_FIELDS = ("status", "reason", "metrics", "notes", "steps", "times", "serving", "timings")
_OPTIONAL = ("steps", "times", "serving")


def code_version() -> str:
    """The package version plus a content hash of everything shipped that can change a number:
    every module of the package (framework/ and components/), every shipped data file
    (framework/data/) and every shipped config and sweep (conf/, sweeps/), so results of other
    code, tables or configs are never taken for these. Computed once per process."""
    return _CODE_VERSION[0] or _compute_code_version()


_CODE_VERSION = [""]


def _compute_code_version() -> str:
    _CODE_VERSION[0] = f"{__version__}+{tree_digest(_shipped_trees())[:12]}"
    return _CODE_VERSION[0]


def _shipped_trees() -> List[Tuple[str, Path, str]]:
    """(name prefix, directory, glob) of each shipped tree, named as in an installed wheel
    (decodelab/, decodelab/components/, ...) so a checkout and a wheel of the same files agree."""
    return [
        ("", paths.PACKAGE_DIR, "*.py"),
        ("components/", Path(decodelab.components.__file__).resolve().parent, "*.py"),
        ("data/", paths.DATA_DIR, "*"),
        ("conf/", paths.CONF_DIR, "*.yaml"),
        ("sweeps/", paths.SWEEPS_DIR, "*.yaml"),
    ]


def tree_digest(trees: List[Tuple[str, Path, str]]) -> str:
    """sha256 of the names and bytes of the files of `trees` (see _shipped_trees), in name order;
    a tree nested in another (a wheel's decodelab/conf) is counted once, under its own prefix."""
    roots = [Path(root).resolve() for _, root, _ in trees]
    files = {}
    for (prefix, _, pattern), root in zip(trees, roots):
        nested = [r for r in roots if r != root and root in r.parents]
        for f in root.rglob(pattern):
            if f.is_file() and "__pycache__" not in f.parts and not any(r in f.parents for r in nested):
                files[prefix + f.relative_to(root).as_posix()] = f
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name].read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def config_hash(cfg_dict: Dict[str, Any]) -> str:
    """A stable hash of a resolved design (everything but where and how it is recorded), of the
    content of each file it names (named_files) and of the code version: the key on which
    re-running a sweep skips designs already recorded."""
    design = {k: v for k, v in cfg_dict.items() if k not in NOT_DESIGN}
    text = json.dumps(design, sort_keys=True, separators=(",", ":"), default=str)
    files = named_files(design, text)
    if files:
        text += json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((code_version() + text).encode()).hexdigest()[:20]


# Config fields whose string values are file paths (a user's or a shipped operator table, a
# request trace); any other string value ending in one of these suffixes is taken for a path too.
FILE_FIELDS = ("hardware.op_tables", "workload.trace")
_FILE_END = re.compile(r'\.(?:csv|parquet|tsv|jsonl?)"', re.IGNORECASE)  # in the design's JSON


def named_files(design: Dict[str, Any], text: str = "") -> Dict[str, str]:
    """{path as given: sha256 of the file's bytes} of each existing file the design names
    (resolved as the model resolves it, decodelab.paths.resolve_user_path), so a table or trace
    edited in place gives the design a new key. `text`: the design as JSON, if at hand."""
    text = text or json.dumps(design, default=str)
    values = set()
    for m in _FILE_END.finditer(text):  # back to the string's opening quote (an unescaped one)
        start = m.start()
        while (start := text.rfind('"', 0, start)) > 0 and text[start - 1] == "\\":
            pass
        values.add(json.loads(text[start : m.end()]))
    for name in FILE_FIELDS:
        node: Any = design
        for part in name.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values.update(_strings(node))
    return {v: d for v in sorted(values) if v and (d := _file_digest(v))}


def _strings(node: Any) -> List[str]:
    """Every string in a nested dict/list config."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        node = list(node.values())
    return [s for v in node for s in _strings(v)] if isinstance(node, (list, tuple)) else []


_FILE_DIGESTS: Dict[Tuple[str, int, int], str] = {}
_RESOLVED: Dict[Tuple[str, str], str] = {}  # (value, working directory) -> absolute path


def _file_digest(value: str) -> str:
    """sha256 of the file `value` names ("" if it names none), cached per path, mtime and size."""
    try:
        where = (value, os.getcwd())
        if where not in _RESOLVED:
            p = paths.resolve_user_path(value)
            if not p.is_file():
                return ""
            _RESOLVED[where] = os.path.abspath(p)
        path = _RESOLVED[where]
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
        if key not in _FILE_DIGESTS:
            _FILE_DIGESTS[key] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return _FILE_DIGESTS[key]
    except (OSError, ValueError):  # not a path (too long, a NUL byte), gone or unreadable
        return ""
