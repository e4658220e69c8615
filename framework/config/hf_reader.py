"""The reading primitives of `decodelab import-model` (config/hf_model.py and the family readers hf_*.py): a
parsed config.json as read (`Keys`: which keys were used, which a family's transformers defaults filled in), the
fields imported with where each came from (`Imported`), an integer key's value (`positive_int`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from decodelab.errors import ConfigError


@dataclass
class Imported:
    name: str
    path: str
    model_type: str
    values: Dict[str, Any] = field(default_factory=dict)  # ModelConfig field -> value
    why: Dict[str, str] = field(default_factory=dict)  # ModelConfig field -> where it came from
    unused: List[str] = field(default_factory=list)  # config.json keys not read
    unexpressed: List[str] = field(default_factory=list)  # what the schema cannot express
    notes: List[str] = field(default_factory=list)

    def set(self, key: str, value, why: str) -> None:
        self.values[key] = value
        self.why[key] = why


class Keys:
    """config.json as read: `get` marks a key used; null counts as absent (HF writes null for
    'not set'). `defaults`: the family's transformers defaults for keys the file omits (not for
    keys it sets to null); `defaulted` records those read."""

    def __init__(self, d: dict, defaults: Dict[str, Any] = None):
        self.d, self.used, self.defaulted = d, set(), set()
        self.defaults = {k: v for k, v in (defaults or {}).items() if k not in d}

    def has(self, k: str) -> bool:
        return self.d.get(k) is not None or k in self.defaults

    def get(self, k: str, default=None):
        self.used.add(k)
        if k in self.defaults:
            self.defaulted.add(k)
            return self.defaults[k]
        v = self.d.get(k)
        return default if v is None else v

    def first(self, *keys: str):
        """(key, value) of the first key set, or (None, None)."""
        for k in keys:
            if self.has(k):
                return k, self.get(k)
        return None, None


def positive(v, label: str) -> int:
    """`v` as a positive integer: ConfigError naming `label` (its key) unless it is one."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{label}={v!r} must be a positive integer")
    return v


def positive_int(r: Keys, k: str) -> int:
    """The value of config.json key `k` as a positive integer (positive)."""
    return positive(r.get(k), f"config.json {k}")
