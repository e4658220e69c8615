"""Sweep files (sweeps/*.yaml, or a user's): their jobs, expanded with Hydra's own override
parser, and their `claim:` block. A sweep file is an ordinary Hydra config
(`decodelab -m --config-dir sweeps --config-name NAME` runs it)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Dict, List, Tuple

from omegaconf import OmegaConf

from decodelab.paths import SWEEPS_DIR


class SweepError(ValueError):
    """Bad sweep input, reported as one line per problem before anything runs."""


def expand(params: Dict[str, str]) -> List[Dict[str, str]]:
    """The jobs of a sweep: the cartesian product of Hydra sweep values (`a,b,c`, `range(...)`,
    `choice(...)`), parsed with Hydra's own override parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
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
