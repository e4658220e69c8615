"""The largest request rate a design sustains under service-level objectives (SLOs), and its
goodput (`decodelab slo`, a `slo:` block in a search space).

A design is a black box `evaluate_at(rate) -> Result`: an open-loop serving run at Poisson
arrival rate `workload.arrival_rate` (requests/s into one simulated replica), fixed seed. A rate
*passes* when, over the simulated requests,

- every SLO holds at the percentile: p`pct` TTFT <= ttft_ms, p`pct` TPOT <= tpot_ms, and (if
  given) p`pct` end-to-end latency <= e2e_ms (the serving run's own `<metric>_p<pct>_ms`);
- the run reached a steady state: by Little's law the mean number of requests in the system is
  rate x mean E2E; it must be at most `max_in_flight` (0.25) of the simulated requests. A run
  of N requests cannot show a batch or a queue above N, so a rate beyond what the engine can
  serve may keep its percentiles inside the SLOs merely because the run ends first; such a rate
  fails with the binding `n_requests` (raise workload.n_requests to look further).

The search (find_max_rate) brackets the boundary from `start` (doubling while the rate passes,
halving while it fails) and bisects geometrically until the last passing rate `lo` and the
first failing rate `hi` satisfy hi / lo <= 1 + tol. Arrival times scale exactly as 1 / rate for
a fixed seed (common random numbers), so the probes differ only in the rate. The answer is
`lo`: a rate that passes with a failing rate at most `tol` above it. That the SLO holds at
every rate below `lo` is what monotonicity gives (tested, not assumed: a design whose
percentiles are not monotone in the rate gets the boundary the bracket found). The precision
is also bounded by the simulated request count: percentiles of N requests, and the steady-state
condition above.

Goodput, as DistServe (Zhong et al., OSDI'24) defines it: the rate of requests that meet every
SLO (TTFT_i, TPOT_i and E2E_i of request i each within its bound), here at the max rate R
(all replicas) with the share a of requests that meet every SLO: `goodput_rps` = R x a,
`goodput_tok_s` = R x (output tokens of the requests that meet it) / N, the steady-state rate
(the serving run's own tok_s_* divide by the makespan, which includes the drain after the last
arrival), and `goodput_tok_s_per_chip` = goodput_tok_s / chips. DistServe's
"per-GPU goodput" (max rate under the SLO / GPUs) is `max_rate_per_chip_rps`. Replicas and
chips are read from the result's own metrics (tok_s_system / tok_s_aggregate and
tok_s_system / tok_s_per_chip), so any parallelism or pool layout that reports those works.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from decodelab.core.result import Result
from decodelab.modes.serving.layout import Req

PCTS = (50, 90, 99)  # the percentiles a serving run reports
LIMITS = ("ttft_ms", "tpot_ms", "e2e_ms")
MAX_DOUBLINGS = 24  # bracket: at most start x 2^24 (16.7 M x) and start / 2^24
START_RATE = 4.0  # requests/s per replica when the workload gives none


class SloError(ValueError):
    """Bad SLO input: one line naming the field and its allowed values."""


@dataclass(frozen=True)
class SLO:
    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None
    e2e_ms: Optional[float] = None
    pct: int = 90
    tol: float = 0.02  # relative width of the final bracket
    max_in_flight: float = 0.25  # steady state: rate x mean E2E <= this share of the requests

    def limits(self) -> Dict[str, float]:
        """{metric stem: bound in ms} of the SLOs given."""
        return {k[:-3]: getattr(self, k) for k in LIMITS if getattr(self, k) is not None}

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "slo.", flag: Callable[[str], str] = None) -> "SLO":
        """An SLO from a mapping (a space file's `slo:` block, or the command's flags);
        raises SloError naming `where` + the key."""
        if not isinstance(d, dict):
            raise SloError(f"{where.rstrip('.')}: must map {', '.join(cls.keys())} to numbers")
        bad = sorted(set(d) - set(cls.keys()))
        if bad:
            raise SloError(f"{where}{bad[0]}: unknown key; allowed: {', '.join(cls.keys())}")
        s = cls(**{k: v for k, v in d.items() if v is not None})
        s.check(where, flag)
        return s

    @staticmethod
    def keys() -> Tuple[str, ...]:
        return tuple(f.name for f in SLO.__dataclass_fields__.values())

    def check(self, where: str = "slo.", flag: Callable[[str], str] = None) -> None:
        name = flag or (lambda k: f"{where}{k}")

        def number(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        for k in LIMITS:
            v = getattr(self, k)
            if v is not None and not (number(v) and v > 0):
                raise SloError(f"{name(k)}={v!r}: must be a number > 0 (milliseconds)")
        if not self.limits():
            raise SloError(f"{name('ttft_ms')}, {name('tpot_ms')} or {name('e2e_ms')}: give at least one SLO")
        if self.pct not in PCTS or isinstance(self.pct, bool):
            raise SloError(f"{name('pct')}={self.pct!r}: must be one of {', '.join(map(str, PCTS))}")
        if not (number(self.tol) and 0 < self.tol < 1):
            raise SloError(f"{name('tol')}={self.tol!r}: must be a number in (0, 1) (relative)")
        if not (number(self.max_in_flight) and 0 < self.max_in_flight <= 1):
            raise SloError(f"{name('max_in_flight')}={self.max_in_flight!r}: must be a number in (0, 1]")


@dataclass
class Probe:
    """One rate tried: whether it passes and by what margins."""

    rate: float
    passes: bool
    ratios: Dict[str, float] = field(default_factory=dict)  # value / bound per SLO (and n_requests)
    status: str = "ok"
    reason: str = ""

    def failing(self) -> List[str]:
        """The SLOs it misses, worst first."""
        return [k for k, v in sorted(self.ratios.items(), key=lambda kv: -kv[1]) if v > 1.0]


def judge(res: Result, slo: SLO, rate: float) -> Probe:
    if res.status != "ok":
        return Probe(rate, False, status=res.status, reason=res.reason)
    m = res.metrics
    need = [f"{k}_p{slo.pct}_ms" for k in slo.limits()] + ["e2e_ms", "n_requests"]
    missing = [k for k in need if k not in m]
    if missing:
        return Probe(
            rate, False, status="invalid", reason=f"the result has no {missing[0]} (not a serving run)"
        )
    ratios = {f"{k}_p{slo.pct}": m[f"{k}_p{slo.pct}_ms"] / b for k, b in slo.limits().items()}
    ratios["n_requests"] = rate * m["e2e_ms"] * 1e-3 / (slo.max_in_flight * max(m["n_requests"], 1.0))
    return Probe(rate, all(v <= 1.0 for v in ratios.values()), ratios)


@dataclass
class Search:
    """The outcome for one design: status ok with the max rate, or the reason there is none."""

    status: str
    reason: str = ""
    rate: float = 0.0  # max rate per replica (lo)
    above: Optional[float] = None  # the first failing rate (hi); None: passed up to the cap
    binding: str = ""
    probes: List[Probe] = field(default_factory=list)
    result: Optional[Result] = None  # the serving result at `rate`


def _rate(r: float) -> float:
    return float(f"{r:.6g}")  # a rate as the override writes it


def find_max_rate(evaluate_at: Callable[[float], Result], slo: SLO, start: float = START_RATE) -> Search:
    """Bracket and bisect the largest passing rate (module docstring). Never raises for a design."""
    probes: List[Probe] = []
    results: Dict[float, Result] = {}

    def probe(r: float) -> Probe:
        r = _rate(r)
        res = evaluate_at(r)
        p = judge(res, slo, r)
        probes.append(p)
        results[r] = res
        return p

    start = _rate(start if start and start > 0 else START_RATE)
    p = probe(start)
    if p.status != "ok":  # does not run at all (fits no request, invalid, a crash)
        return Search(p.status, p.reason, probes=probes)
    lo: Optional[Probe] = p if p.passes else None
    hi: Optional[Probe] = None if p.passes else p
    for _ in range(MAX_DOUBLINGS):
        if lo is not None and hi is not None:
            break
        q = probe(lo.rate * 2 if lo is not None else hi.rate / 2)
        if q.status != "ok":
            return Search(q.status, f"at {q.rate:.4g} req/s: {q.reason}", probes=probes)
        if q.passes:
            lo = q
        else:
            hi = q
    if lo is None:
        worst = hi.failing()[0]
        return Search(
            "infeasible",
            f"SLO not met even at {hi.rate:.3g} req/s per replica: {_miss(hi, worst, slo)}",
            binding=worst,
            probes=probes,
        )
    while hi is not None and hi.rate / lo.rate > 1.0 + slo.tol:
        mid = _rate(math.sqrt(lo.rate * hi.rate))
        if mid in (lo.rate, hi.rate):
            break
        q = probe(mid)
        if q.status != "ok":
            return Search(q.status, f"at {q.rate:.4g} req/s: {q.reason}", probes=probes)
        lo, hi = (q, hi) if q.passes else (lo, q)
    binding = hi.failing()[0] if hi is not None else "none (passes at the rate cap)"
    return Search(
        "ok",
        rate=lo.rate,
        above=hi.rate if hi else None,
        binding=binding,
        probes=probes,
        result=results[lo.rate],
    )


def _miss(p: Probe, key: str, slo: SLO) -> str:
    if key == "n_requests":
        return "the run is too short to reach a steady state (raise workload.n_requests)"
    stem = key.rsplit("_p", 1)[0]
    bound = slo.limits()[stem]
    return f"p{slo.pct} {stem.upper()} {p.ratios[key] * bound:.4g} ms > {bound:.4g} ms"


def attainment(res: Result, slo: SLO) -> Optional[np.ndarray]:
    """Per request: meets every SLO (its own TTFT, TPOT, E2E), or None without request data."""
    req = (res.serving or {}).get("requests")
    if req is None or not len(req):
        return None
    arrival, first, done = req[:, Req.ARRIVAL], req[:, Req.FIRST], req[:, Req.DONE]
    values = {
        "ttft": (first - arrival) * 1e3,
        "tpot": (done - first) / np.maximum(req[:, Req.OUTPUT] - 1.0, 1.0) * 1e3,
        "e2e": (done - arrival) * 1e3,
    }
    good = np.ones(len(req), bool)
    for k, bound in slo.limits().items():
        good &= values[k] <= bound
    return good


def slo_metrics(search: Search, slo: SLO) -> Dict[str, float]:
    """The metrics of an ok search: the serving metrics at the max rate, plus max_rate_*,
    goodput_*, slo_attainment_pct, tok_s_per_user, the probes and the final bracket."""
    res = search.result
    m = dict(res.metrics)
    replicas = m["tok_s_system"] / m["tok_s_aggregate"]
    chips = m["tok_s_system"] / m["tok_s_per_chip"]
    out = {
        "max_rate_per_replica_rps": search.rate,
        "max_rate_rps": search.rate * replicas,
        "max_rate_per_chip_rps": search.rate * replicas / chips,
        "tok_s_per_user": m["tok_s_user"],
        "slo_probes": float(len(search.probes)),
        "slo_bracket_pct": 100.0 * ((search.above or search.rate) / search.rate - 1.0),
        "slo_in_flight": search.rate * m["e2e_ms"] * 1e-3,
        "replicas": replicas,
        "chips": chips,
    }
    good = attainment(res, slo)
    if good is not None:
        req = res.serving["requests"]
        n = len(req)
        rate = out["max_rate_rps"]  # offered, all replicas: in a steady state also the completion rate
        out["slo_attainment_pct"] = 100.0 * float(good.mean())
        out["goodput_rps"] = rate * float(good.sum()) / n
        out["goodput_tok_s"] = rate * float(req[good, Req.OUTPUT].sum()) / n
        out["goodput_tok_s_per_chip"] = out["goodput_tok_s"] / chips
        for pool in ("prefill", "decode"):  # disaggregated designs: per chip of each pool
            if m.get(f"{pool}_chips"):
                out[f"goodput_tok_s_per_{pool}_chip"] = out["goodput_tok_s"] / m[f"{pool}_chips"]
    m.update(out)
    return m


def search_result(search: Search, slo: SLO) -> Result:
    """One Result for the design: ok with slo_metrics, or the search's status and reason."""
    if search.status != "ok":
        return Result(
            search.status, search.reason, notes=[f"binding: {search.binding}"] if search.binding else []
        )
    notes = [f"SLO binding: {search.binding}"] + list(search.result.notes)
    notes.append(
        f"max SLO-bound rate {search.rate:.4g} req/s per replica (binding: {search.binding}; "
        f"{len(search.probes)} probes, bracket +{100 * ((search.above or search.rate) / search.rate - 1):.2g}%)"
    )
    return Result("ok", metrics=slo_metrics(search, slo), notes=notes, serving=search.result.serving)
