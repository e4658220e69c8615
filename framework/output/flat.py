"""One flattening of a design's resolved config, used wherever designs become columns or
params: the results table (`decodelab.output.table`), the MLflow params of a design's run (the
Hydra callback, `decodelab sweep` and `decodelab sync` pass `flat_params` to the tracking
layer, which may not import this package) and `decodelab.load_results`.

The rule:

- a dict becomes dotted keys: `hardware.memory.hbm.bandwidth_gb_s`;
- a list or tuple stays one value, written as JSON text: `[1, 2]`, `["1.0.0rc3"]`, `[]`;
- other values (str, int, float, bool, None) are kept as they are;
- `tracking`, `quiet` and `claim` are not design params and are left out; an optional feature
  that is off (a group with `enabled: false`: speculative, coe, disagg) keeps only its switch
  (`speculative.enabled`), not the fields of its unused models.

MLflow params are text: `param_text` writes a flat value as MLflow stores it (`str`, lists
already JSON), so a table cell, a param and a `load_results` cell of one design read the same.
"""

from __future__ import annotations

import json
from typing import Any, Dict

NOT_PARAMS = ("tracking", "quiet", "claim")  # config keys that are not design params


def flat_value(v: Any) -> Any:
    """A leaf value as stored: lists and tuples as JSON text, the rest unchanged."""
    if isinstance(v, (list, tuple)):
        return json.dumps(list(v), default=str)
    return v


def _into(d: Dict[str, Any], prefix: str, out: Dict[str, Any]) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _into(v, f"{prefix}{k}.", out)
        else:
            out[f"{prefix}{k}"] = flat_value(v)


def flat_params(cfg_dict: Dict[str, Any]) -> Dict[str, Any]:
    """A resolved config (a plain dict) as flat design params (see the module docstring)."""
    out: Dict[str, Any] = {}
    for g, v in (cfg_dict or {}).items():
        if g in NOT_PARAMS:
            continue
        if isinstance(v, dict) and v.get("enabled") is False:
            out[f"{g}.enabled"] = False
        elif isinstance(v, dict):
            _into(v, f"{g}.", out)
        else:
            out[str(g)] = flat_value(v)
    return out


def param_text(v: Any) -> str:
    """A flat value as MLflow param text."""
    return str(flat_value(v))
