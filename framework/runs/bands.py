"""Uncertainty bands of the claim figures (`decodelab claims --bands`): each placeholder or
calibrated parameter's range (data/calibration.yaml) propagated to every figure whose designs read
it. Per figure: one-at-a-time (each parameter at its low and its high end, the others at their
point values), then a Latin hypercube of `n` points (scipy.stats.qmc, seeded) over all the
parameters the figure's designs read. The band is [min, max] of every value computed (point,
one-at-a-time, hypercube); the movers are the parameters with the largest one-at-a-time swing
|f(high) - f(low)|. A figure passes or fails on its point value; the band is information.

Cost: a parameter is set only on the designs that read it (FigureModel), and a design that did not
move at either end of a parameter's range is held at that parameter's point in the hypercube
(interactions with no one-at-a-time effect on that design are left out: stated, not hidden)."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from decodelab.runs.figure_eval import FigureModel, figure_model
from decodelab.runs.placeholders import Param

Law = Callable[[Dict[str, float]], Optional[float]]


def one_at_a_time(
    f: Law, ranges: Dict[str, Tuple[float, float]]
) -> Dict[str, Tuple[Optional[float], Optional[float]]]:
    """name -> (f with that parameter at its low end, f at its high end), the rest at the point."""
    return {n: (f({n: lo}), f({n: hi})) for n, (lo, hi) in ranges.items()}


def hypercube(ranges: Dict[str, Tuple[float, float]], n: int = 16, seed: int = 0) -> List[Dict[str, float]]:
    """`n` Latin-hypercube points over the ranges (one stratum per point in every dimension)."""
    from scipy.stats import qmc

    names = list(ranges)
    if not names or n < 1:
        return []
    u = qmc.LatinHypercube(d=len(names), seed=seed).random(n)
    return [{k: ranges[k][0] + x * (ranges[k][1] - ranges[k][0]) for k, x in zip(names, row)} for row in u]


def band(f: Law, ranges: Dict[str, Tuple[float, float]], n: int = 16, seed: int = 0, cast=None) -> dict:
    """Point value, one-at-a-time values and swings, hypercube values, and the band of a law `f`
    (a map of parameter values -> figure; parameters not in the map at their point). `cast`
    (name, value) -> value rounds a count."""
    cast = cast or (lambda _n, v: v)
    point = f({})
    oat = one_at_a_time(lambda a: f({k: cast(k, v) for k, v in a.items()}), ranges)
    swings = {k: abs(hi - lo) for k, (lo, hi) in oat.items() if lo is not None and hi is not None}
    lhs = [f({k: cast(k, v) for k, v in a.items()}) for a in hypercube(ranges, n, seed)]
    seen = [v for v in [point, *(x for pair in oat.values() for x in pair), *lhs] if v is not None]
    top = sorted(swings.items(), key=lambda kv: -kv[1])
    return {
        "point": point,
        "lo": min(seen) if seen else None,
        "hi": max(seen) if seen else None,
        "oat": oat,
        "swings": swings,
        "lhs": lhs,
        "movers": [(k, s) for k, s in top if s > 0][:2],
    }


def _mark_inert(m: FigureModel, fid: str, name: str, ends: Sequence) -> None:
    """Designs of the figure whose metrics equal the point's at both ends of `name`'s range."""
    _, path, _, _ = m.figs[fid]
    for i in m.reads(fid):
        if name in m.applies(path, i):
            base = m.result(path, i, {})
            if all(m.result(path, i, {name: e}) == base for e in ends):
                m.inert.add((path, i, name))


def figure_band(m: FigureModel, fid: str, n: int = 16, seed: int = 0) -> dict:
    """The band of one claim figure over the parameters its designs read."""
    names = m.touches(fid)
    params: Dict[str, Param] = {k: m.params[k] for k in names}
    ranges = {k: (p.lo, p.hi) for k, p in params.items()}
    for k, p in params.items():  # one-at-a-time first, so inert designs are known for the hypercube
        ends = (p.cast(p.lo), p.cast(p.hi))
        for e in ends:
            m.value(fid, {k: e})
        _mark_inert(m, fid, k, ends)
    out = band(lambda a: m.value(fid, a), ranges, n, seed, cast=lambda k, v: params[k].cast(v))
    out["params"] = names
    return out


def run_bands(
    params: Dict[str, Param], ids=None, files=None, what_if=(), n: int = 16, seed: int = 0, on_figure=None
) -> Tuple[List[dict], int]:
    """One row per figure (id, fid, figure, point, lo, hi, movers, params) and the number of
    design evaluations. `on_figure(fid)` is called as each figure starts (a progress bar)."""
    rows = []
    with figure_model(params, ids, files, what_if) as m:
        for fid, (_, path, _, fig) in m.figs.items():
            if on_figure:
                on_figure(fid)
            b = figure_band(m, fid, n, seed)
            rows.append(
                {
                    "id": fid.split(":")[0],
                    "fid": fid,
                    "figure": fig["name"],
                    "point": b["point"],
                    "lo": b["lo"],
                    "hi": b["hi"],
                    "movers": b["movers"],
                    "params": b["params"],
                }
            )
        return rows, m.evals
