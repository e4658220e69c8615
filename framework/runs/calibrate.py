"""Calibrate one placeholder parameter on one published figure (`decodelab calibrate PARAM --on
FIGURE`): the value inside the parameter's stated range (data/calibration.yaml) at which the
figure's simulated value equals its published one: scipy's brentq where the figure crosses the
published value inside the range, else the bounded minimiser of the distance (the closest the range
allows, said so). A published range [a, b] is met at its nearer end (the smallest move that puts
the figure inside; a figure already inside needs none). The figure is evaluated as `decodelab
claims` evaluates it (decodelab.runs.figure_eval). One figure per parameter, one parameter per
figure: a second calibration is refused."""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from decodelab.errors import ConfigError
from decodelab.runs.figure_eval import claim_todo, figure_model
from decodelab.runs.placeholders import (
    REGISTRY,
    calibrated_line,
    calibration_figures,
    figure_ids,
    load_params,
    registry_edit,
    resolve_figure,
    resolve_param,
    value_edits,
)


def target_of(published, current: float) -> float:
    """The value to reach: the published number, or the nearer end of a published range (the
    current value itself when it is already inside)."""
    if isinstance(published, (list, tuple)):
        lo, hi = float(published[0]), float(published[1])
        return lo if current < lo else hi if current > hi else current
    return float(published)


def solve(
    f: Callable[[float], Optional[float]], target: float, lo: float, hi: float, integer: bool = False
) -> Tuple[float, str]:
    """(x in [lo, hi] with f(x) = target, how): `root` (brentq on a sign change) or `closest`
    (bounded minimisation of |f(x) - target| when no value in the range reaches it). With
    `integer`, the better of the two integers around x."""
    from scipy.optimize import brentq, minimize_scalar

    def g(x):
        v = f(x)
        if v is None:
            raise ConfigError(f"the figure has no value at {x:g} (no design of it is ok there)")
        return v - target

    glo, ghi = g(lo), g(hi)
    if glo == 0 or ghi == 0:
        x, how = (lo if glo == 0 else hi), "root"
    elif glo * ghi < 0:
        x, how = brentq(g, lo, hi, xtol=1e-9 * max(1.0, abs(hi - lo)), rtol=1e-10), "root"
    else:
        res = minimize_scalar(
            lambda x: abs(g(x)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-6 * (hi - lo)}
        )
        x = min((res.x, lo, hi), key=lambda y: abs(g(y)))
        how = "closest"
    if integer:
        x = min((float(int(x)), float(int(x) + 1)), key=lambda y: abs(g(min(max(y, lo), hi))))
    return x, how


def rounded(f, x: float, p, published, target: float) -> Tuple[object, Optional[float]]:
    """(value, figure at it): x to 4 significant figures, rounded the way that keeps the figure
    inside a published range (else nearer the target), within the parameter's range."""
    import math

    step = 10 ** (math.floor(math.log10(abs(x))) - 3) if x else 1e-4
    cands = {
        p.cast(min(max(c, p.lo), p.hi))
        for c in (round(x / step) * step, math.floor(x / step) * step, math.ceil(x / step) * step)
    }
    scored = [(c, f(c)) for c in sorted(cands)]
    inside = lambda v: (
        isinstance(published, (list, tuple))
        and v is not None
        and float(published[0]) <= v <= float(published[1])
    )  # noqa: E731
    best = min(
        scored, key=lambda cv: (not inside(cv[1]), abs((cv[1] if cv[1] is not None else math.inf) - target))
    )
    return float(f"{best[0]:.6g}") if not p.integer else best[0], best[1]


def _refuse_second(p, fid: str, params) -> None:
    if p.calibrated_on:
        c = p.calibrated_on
        raise ConfigError(
            f"{p.name} is already calibrated on {c['figure']} (value {c['value']}, {c.get('date', '')}); "
            f"one figure per parameter (framework/data/{REGISTRY.name})"
        )
    other = calibration_figures(params).get(fid)
    if other:
        raise ConfigError(f"{fid} already calibrates {other}; one parameter per figure")


def calibrate(param: str, figure: str, date: str, what_if=()) -> Dict:
    """The calibration of `param` on `figure`: value, how it was found, the figure before and at
    the value, and the edits that record it (not applied: apply_edits)."""
    params = load_params()
    p = resolve_param(param, params)
    todo = claim_todo()
    fid, _, _, fig = resolve_figure(figure, figure_ids([(t[0], t[1]) for t in todo]))
    _refuse_second(p, fid, params)
    with figure_model(params, ids=[fid.split(":")[0]], what_if=what_if) as m:
        if p.name not in m.touches(fid):
            raise ConfigError(
                f"{p.name} ({p.key}) is read by no design of {fid} ({fig['name']}); pick a figure it moves"
            )
        before = m.value(fid)
        if before is None:
            raise ConfigError(f"{fid} ({fig['name']}) has no simulated value at the point")
        target = target_of(fig["published"], before)
        x, how = solve(lambda v: m.value(fid, {p.name: p.cast(v)}), target, p.lo, p.hi, p.integer)
        value, after = rounded(lambda v: m.value(fid, {p.name: v}), x, p, fig["published"], target)
        point = m.points.get(p.name)
    note = f"calibrated on {fid}, framework/data/{REGISTRY.name}"
    return {
        "param": p.name,
        "key": p.key,
        "figure": fid,
        "name": fig["name"],
        "published": fig["published"],
        "target": target,
        "point": point,
        "value": value,
        "how": how,
        "before": before,
        "after": after,
        "range": (p.lo, p.hi),
        "edits": value_edits(p, value, note=note),
        "registry": registry_edit(p.name, calibrated_line(fid, value, date)),
    }
