"""`evaluate(cfg)`: the one dispatcher. A Composition of Experts run (coe.enabled) goes to
modes.coe, everything else to modes.single (batch fill, serving, speculative or static decode).

`evaluate` never raises for bad or infeasible designs: it returns a Result whose `status` is
`ok`, `infeasible` or `invalid`, with the reason, so a sweep records it and carries on."""

from __future__ import annotations

from decodelab.core.result import Result
from decodelab.modes.coe import evaluate_coe
from decodelab.errors import ConfigError
from decodelab.modes.resolve import resolved
from decodelab.modes.single import evaluate_single


def evaluate(cfg, keep_steps: bool = True) -> Result:
    """Run one design. Returns a Result (status, reason, metrics, notes, steps, times, ...).
    `cfg` is resolved once here (modes/resolve.py): the modes and the core read plain values."""
    try:
        cfg = resolved(cfg)
    except ConfigError as e:
        return Result.invalid(str(e))
    if getattr(cfg, "coe", None) is not None and cfg.coe.enabled:  # Composition of Experts
        return evaluate_coe(cfg, keep_steps)
    return evaluate_single(cfg, keep_steps)
