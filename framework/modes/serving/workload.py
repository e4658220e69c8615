"""Serving workloads as plain arrays: the requests' arrival times and prompt / output lengths.

`requests(cfg)` turns `cfg.workload` into (arrival_s, prompt_len, output_len) arrays, seeded and
reproducible (numpy's PCG64 with `workload.seed`):
- closed_loop: arrival times are decided by the scheduler as clients free up (all NaN here; the
  first `concurrency` requests arrive at t = 0);
- open_loop: Poisson arrivals at `arrival_rate`, or the rows of `trace`;
- lengths: fixed, uniform [low, high], lognormal (mean = prompt_len / output_len, `sigma` of the
  log, clipped to [low, high]) or the trace's columns.
Bad values raise ConfigError with one line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

import numpy as np

from decodelab.errors import ConfigError
from decodelab.modes.resolve import with_fields
from decodelab.paths import DATA_DIR, SOURCE_ROOT, resolve_user_path

KINDS = ("static", "closed_loop", "open_loop")
DISTS = ("fixed", "uniform", "lognormal", "trace")
TRACE_COLUMNS = ("arrival_s", "prompt_len", "output_len")


def resolve_path(path: str) -> Path:
    """A file path as given, else relative to the source checkout or the shipped data."""
    return resolve_user_path(path)


def load_trace(path: str):
    import pandas as pd

    p = resolve_path(path)
    if not p.is_file():
        raise ConfigError(
            f"workload.trace={path!r}: no such file (looked in the working "
            f"directory, {SOURCE_ROOT} and {DATA_DIR})"
        )
    try:
        df = pd.read_csv(p, comment="#")
    except Exception as e:  # pandas' parser errors have many types
        raise ConfigError(f"workload.trace={path!r} is not a readable CSV ({type(e).__name__})")
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing or df.empty:
        raise ConfigError(
            f"workload.trace={path!r} needs columns {', '.join(TRACE_COLUMNS)} and "
            f"at least one row; missing: {', '.join(missing) or 'rows'}"
        )
    cols = []
    for c in TRACE_COLUMNS:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
        if not np.isfinite(v).all():
            k = int(np.argmax(~np.isfinite(v)))
            raise ConfigError(
                f"workload.trace={path!r}: column {c} needs a number in every row; "
                f"data row {k + 1} has {str(df[c].iloc[k])!r}"
            )
        low, what = (0.0, ">= 0") if c == TRACE_COLUMNS[0] else (1.0, ">= 1 (whole tokens)")
        bad = ~(v >= low) | ((v != np.round(v)) if c != TRACE_COLUMNS[0] else False)
        if bad.any():
            k = int(np.argmax(bad))
            raise ConfigError(
                f"workload.trace={path!r}: column {c} needs {'an integer ' if low else 'a number '}"
                f"{what} in every row; data row {k + 1} has {str(df[c].iloc[k])!r}"
            )
        cols.append(v)
    order = np.argsort(cols[0], kind="stable")
    return tuple(v[order] for v in cols)


def _lengths(
    dist, centre: int, n: int, rng, field: str, trace_values, limit: int, minimum: int
) -> np.ndarray:
    if dist.kind not in DISTS:
        raise ConfigError(f"workload.{field}.kind={dist.kind!r} is not one of: {', '.join(DISTS)}")
    if dist.kind == "fixed":
        return np.full(n, float(centre))
    if dist.kind == "trace":
        if trace_values is None:
            raise ConfigError(f"workload.{field}.kind=trace needs workload.trace (a CSV file)")
        return np.maximum(trace_values[:n].astype(float), minimum)
    lo = dist.low if dist.low > 0 else minimum
    hi = dist.high if dist.high > 0 else limit
    if not minimum <= lo <= hi:
        raise ConfigError(
            f"workload.{field}: low={dist.low} and high={dist.high} must satisfy {minimum} <= low <= high"
        )
    if dist.kind == "uniform":
        return rng.integers(lo, hi + 1, size=n).astype(float)
    if not dist.sigma > 0:
        raise ConfigError(f"workload.{field}.sigma={dist.sigma} must be > 0 for a lognormal")
    mu = np.log(centre) - dist.sigma**2 / 2.0  # mean of the lognormal = centre
    return np.clip(np.rint(rng.lognormal(mu, dist.sigma, size=n)), lo, hi)


def check_workload(w) -> None:
    if w.kind not in KINDS:
        raise ConfigError(f"workload.kind={w.kind!r} is not one of: {', '.join(KINDS)}")
    if w.kind == "closed_loop" and w.concurrency < 1:
        raise ConfigError(f"workload.concurrency={w.concurrency} must be >= 1 for closed_loop")
    if w.warmup_requests < 0:
        raise ConfigError(f"workload.warmup_requests={w.warmup_requests} must be >= 0")
    if w.n_requests < 0:
        raise ConfigError(f"workload.n_requests={w.n_requests} must be >= 0 (0: default count)")
    if not w.think_ms >= 0:
        raise ConfigError(f"workload.think_ms={w.think_ms} must be >= 0")
    if not w.prompt_bytes_per_token > 0:
        raise ConfigError(f"workload.prompt_bytes_per_token={w.prompt_bytes_per_token} must be > 0")
    if w.kind == "open_loop" and not w.trace and not w.arrival_rate > 0:
        raise ConfigError(
            f"workload.arrival_rate={w.arrival_rate} must be > 0 for open_loop (or give workload.trace)"
        )


def simulated_warmup(w) -> int:
    """Warm-up requests the closed loop simulates ahead of the measured ones (issued first, so
    they are the first indices). With warmup_drain the measured phase starts from an idle,
    warm engine (the prefix cache is not modelled), exactly as simulating no warm-up at all."""
    if w.kind != "closed_loop" or w.warmup_drain:
        return 0
    return int(w.warmup_requests)


def requests(w, max_context: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s, prompt_len, output_len) per request, in arrival order."""
    check_workload(w)
    rng = np.random.default_rng(w.seed)
    trace = load_trace(w.trace) if w.trace else None
    if w.kind == "closed_loop":
        n = (w.n_requests or 10 * w.concurrency) + simulated_warmup(w)
        if trace is not None and "trace" in (w.prompt_dist.kind, w.output_dist.kind):
            n = min(n, len(trace[0]))  # trace lengths: at most every row
    elif trace is not None:
        n = min(w.n_requests, len(trace[0])) if w.n_requests else len(trace[0])
    else:
        n = w.n_requests or 1000
    prompt = _lengths(
        w.prompt_dist,
        w.prompt_len,
        n,
        rng,
        "prompt_dist",
        trace[1] if trace is not None else None,
        max_context,
        1,
    )
    output = _lengths(
        w.output_dist,
        w.output_len,
        n,
        rng,
        "output_dist",
        trace[2] if trace is not None else None,
        max_context,
        2,
    )
    # sampled lengths respect the model's context (fixed and trace lengths are the user's: a
    # request that does not fit makes the design infeasible, with its reason)
    if w.prompt_dist.kind in ("uniform", "lognormal"):
        prompt = np.minimum(prompt, max_context - 2)
    if w.output_dist.kind in ("uniform", "lognormal"):
        output = np.maximum(np.minimum(output, max_context - prompt), 2)
    if w.kind == "closed_loop":
        arrival = np.full(n, np.nan)
        arrival[: min(n, w.concurrency)] = 0.0
    elif trace is not None:
        arrival = trace[0][:n] - trace[0][0]  # the first request opens the run
    else:
        arrival = np.cumsum(rng.exponential(1.0 / w.arrival_rate, size=n))
        arrival -= arrival[0]  # the first request opens the run
    return arrival, prompt, output


def group_workload(w, groups: int):
    """The workload of one of `groups` data-parallel attention groups, each with its own scheduler
    (components/models/attn_dp.py "In serving"): a closed loop's ceil(concurrency / groups)
    clients with their share of the measured and warm-up requests (an open loop's requests are
    dealt round-robin instead: group_requests). `w` itself when groups <= 1."""
    if groups <= 1 or w.kind != "closed_loop":
        return w
    return with_fields(
        w,
        {
            "concurrency": -(-int(w.concurrency) // groups),
            "n_requests": -(-int(w.n_requests) // groups) if w.n_requests else 0,
            "warmup_requests": -(-int(w.warmup_requests) // groups),
        },
    )


def group_requests(w, max_context: int, groups: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """requests() of one of `groups` attention groups: the group's closed loop (group_workload), or
    every groups-th request of an open loop (round-robin dispatch)."""
    arrival, prompt, output = requests(group_workload(w, groups), max_context)
    if groups > 1 and w.kind != "closed_loop":
        arrival, prompt, output = arrival[::groups], prompt[::groups], output[::groups]
    return arrival, prompt, output
