"""Sweep files (sweeps/*.yaml, or a user's): their jobs, expanded with Hydra's own override
parser, and their `claim:` block. A sweep file is an ordinary Hydra config
(`decodelab -m --config-dir sweeps --config-name NAME` runs it)."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from decodelab.errors import ConfigError
from decodelab.paths import SWEEPS_DIR


class SweepError(ConfigError):
    """Bad sweep input, reported as one line per problem before anything runs (a ConfigError:
    the Python API raises it as decodelab.ConfigError)."""


MAX_DESIGNS_ENV = "DECODELAB_MAX_DESIGNS"
MAX_DESIGNS = 1_000_000  # designs one sweep may expand to unless the user raises the limit


def max_designs(limit: Optional[int] = None) -> int:
    """The design limit: `limit` if given, else $DECODELAB_MAX_DESIGNS, else MAX_DESIGNS."""
    if limit is None:
        text = os.environ.get(MAX_DESIGNS_ENV, "").strip()
        if not text:
            return MAX_DESIGNS
        try:
            limit = int(text)
        except ValueError:
            raise SweepError(f"{MAX_DESIGNS_ENV}={text}: not an integer; give a design count >= 1") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SweepError(f"max_designs={limit!r}: give a design count, an integer >= 1")
    return limit


def n_values(o) -> int:
    """How many values a parsed override sweeps, counted without listing them (range() by
    arithmetic): a sweep of 10^10 designs is refused before anything is expanded."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    v = o.value() if o.is_sweep_override() else None
    if isinstance(v, RangeSweep):
        start, stop, step = v.start, v.stop, v.step
        if all(isinstance(x, int) for x in (start, stop, step)):
            return len(range(start, stop, step))
        return max(0, math.ceil((stop - start) / step)) if step else 0
    if isinstance(v, ChoiceSweep):
        return len(v.list)
    return 1


def check_count(parsed: Sequence, limit: Optional[int] = None) -> int:
    """The number of designs of parsed overrides (a repeated key counted once, as Hydra's basic
    sweeper keeps it); SweepError above the limit, naming the count and how to raise the limit."""
    sizes: Dict[str, int] = {}
    for o in parsed:
        sizes[o.get_key_element()] = n_values(o)
    n = math.prod(sizes.values())
    cap = max_designs(limit)
    if n > cap:
        axes = " x ".join(f"{k}: {v:,}" for k, v in sizes.items() if v > 1)
        raise SweepError(
            f"the sweep has {n:,} designs ({axes}), above the limit of {cap:,}; narrow it, or raise "
            f"the limit with --max-designs N (decodelab sweep / grid / slo) or {MAX_DESIGNS_ENV}=N"
        )
    return n


def expand(params: Dict[str, str], limit: Optional[int] = None) -> List[Dict[str, str]]:
    """The jobs of a sweep: the cartesian product of Hydra sweep values (`a,b,c`, `range(...)`,
    `choice(...)`), parsed with Hydra's own override parser (counted first: check_count)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    check_count(parsed, limit)
    keys, values = [], []
    for o in parsed:
        keys.append(o.get_key_element())
        values.append(
            list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        )
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def sweep_jobs(path: Path) -> List[Dict[str, str]]:
    """The jobs of a sweep file's `hydra.sweeper.params`."""
    raw = OmegaConf.load(path)
    node = OmegaConf.select(raw, "hydra.sweeper.params")
    params = OmegaConf.to_container(node, resolve=False) if node is not None else {}
    return expand({k: str(v) for k, v in params.items()})


def load_sweep(path: Path) -> Tuple[dict, List[Dict[str, str]]]:
    """(claim block, jobs) of a claim sweep file. `decodelab claims` runs the jobs of
    `hydra.sweeper.params` on the primary config, so a file that also sets config keys of its own
    (top-level keys besides `defaults`, `claim` and `hydra`, or a `defaults` entry besides `config`,
    `_self_` and Hydra's own) is a SweepError naming them rather than a silent ignore (`decodelab -m`
    would apply them)."""
    raw = OmegaConf.load(path)
    extra = [str(k) for k in raw.keys() if k not in ("defaults", "claim", "hydra")]
    defaults = raw.get("defaults")
    for d in OmegaConf.to_container(defaults) if defaults is not None else []:
        hydra_own = isinstance(d, dict) and all(str(k).startswith(("hydra/", "override hydra/")) for k in d)
        if d not in ("config", "_self_") and not hydra_own:
            extra.append(f"defaults entry {d}")
    if extra:
        raise SweepError(
            f"{path.name}: sets {', '.join(extra)} outside hydra.sweeper.params, which `decodelab "
            "claims` would not apply; give each as a param there (one value: a fixed override)"
        )
    params = OmegaConf.to_container(raw.hydra.sweeper.params, resolve=False)
    claim = OmegaConf.to_container(raw.claim, resolve=False)
    return claim, expand({k: str(v) for k, v in params.items()})


def find_sweep(target: str) -> Path:
    """A sweep file: a path, or a name under sweeps/ (with or without .yaml)."""
    for p in (Path(target), SWEEPS_DIR / target, SWEEPS_DIR / f"{target}.yaml"):
        if p.is_file():
            return p.resolve()
    names = sorted(str(p.relative_to(SWEEPS_DIR).with_suffix("")) for p in SWEEPS_DIR.rglob("*.yaml"))
    raise SweepError(f"sweep {target!r} is neither a file nor one of sweeps/: {', '.join(names)}")
