"""Search spaces in Hydra's sweep syntax turned into Optuna distributions (decodelab search).
Optuna is imported on first use (an optional extra)."""

from __future__ import annotations

from typing import Dict


def distributions(params: Dict[str, str], error=ValueError) -> Dict[str, object]:
    """Optuna distributions from Hydra sweep syntax, as hydra-optuna-sweeper maps them:
    choice / a,b,c / range -> categorical; interval -> float (int bounds: int); tag(log, ...)."""
    import optuna.distributions as D
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Transformer
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = {}
    for key, spec in params.items():
        try:
            o = parser.parse_override(f"{key}={spec}")
        except HydraException as e:
            raise error(f"params.{key}={spec!r}: {str(e).splitlines()[0]}") from None
        if o.is_choice_sweep() or o.is_range_sweep():
            out[key] = D.CategoricalDistribution(list(o.sweep_iterator(Transformer.encode)))
        elif o.is_interval_sweep():
            v = o.value()
            log = "log" in v.tags
            if isinstance(v.start, int) and isinstance(v.end, int):
                out[key] = D.IntDistribution(v.start, v.end, log=log)
            else:
                out[key] = D.FloatDistribution(v.start, v.end, log=log)
        else:
            raise error(
                f"params.{key}={spec!r} is not a sweep: use choice(...), a,b,c, "
                "range(...), interval(...) or tag(log, interval(...))"
            )
    return out
