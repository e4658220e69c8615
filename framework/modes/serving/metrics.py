"""The metrics of a serving run: per-request latencies (TTFT, TPOT, end to end; mean and
percentiles), inter-token latency, throughput, batch, queue and KV memory over the scheduler's
steps, the decode time by cause, and per chip energy and cost (core/cost.py). simulate.py and the
disaggregated pools (disagg.py, disagg_closed.py) compute theirs from these. Equations:
docs/model.md, "Serving: continuous batching".
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from decodelab.components.placement import GIB
from decodelab.core import cost
from decodelab.core import parallel
from decodelab.core.build import Design
from decodelab.kernel_layout import CAUSES
from decodelab.modes.serving.layout import Req, StepLog

PCTS = (50, 90, 99)


def kv_bytes_per_token_chip(design: Design) -> float:
    """KV bytes one cached token takes on the chip whose pool bounds admission (all layers; under
    pipeline stages, the layers of the stage build() placed)."""
    if "kv_bytes_per_token_chip" in design.memory:
        return float(design.memory["kv_bytes_per_token_chip"])
    return float(sum(op.kv_write_per_token * op.repeat for op in design.ops))


def pct(x: np.ndarray, name: str, out: Dict[str, float], scale: float = 1e3) -> None:
    """`{name}_ms` and `{name}_p50_ms`, ... (PCTS) of x into out: its mean and percentiles x scale."""
    out[f"{name}_ms"] = float(np.mean(x)) * scale
    for p, v in zip(PCTS, np.percentile(x, PCTS)):  # one sort for all of them
        out[f"{name}_p{p}_ms"] = float(v) * scale


def weighted_percentile(values: np.ndarray, weights: np.ndarray, p):
    """The value below which p % of the weight lies (p a number: a float; a sequence: an array)."""
    order = np.argsort(values)
    v, w = values[order], weights[order]
    c = np.cumsum(w)
    if c[-1] <= 0:
        return float("nan") if np.ndim(p) == 0 else np.full(len(p), np.nan)
    i = np.minimum(np.searchsorted(c, np.asarray(p, float) / 100.0 * c[-1]), len(v) - 1)
    return float(v[i]) if np.ndim(p) == 0 else v[i]


def latency_metrics(req: np.ndarray) -> Tuple[Dict[str, float], np.ndarray]:
    """TTFT, TPOT and end-to-end mean and percentiles of the requests (per request TPOT too), and
    TTFT split at the first wave (first_wave_metrics)."""
    arrival, first, done = req[:, Req.ARRIVAL], req[:, Req.FIRST], req[:, Req.DONE]
    tpot = (done - first) / (req[:, Req.OUTPUT] - 1.0)
    m: Dict[str, float] = {}
    pct(first - arrival, "ttft", m)
    pct(tpot, "tpot", m)
    pct(done - arrival, "e2e", m)
    m.update(first_wave_metrics(arrival, first - arrival))
    return m, tpot


# Sends this close to the earliest one are the same instant (float round-off of the send times)
SAME_SEND_S = 1e-9


def first_wave(sent: np.ndarray) -> np.ndarray:
    """Which requests were sent together at the start: at the earliest send, to float round-off."""
    return sent <= sent.min() + SAME_SEND_S


def first_wave_metrics(sent: np.ndarray, ttft: np.ndarray) -> Dict[str, float]:
    """The requests sent together at the start (a closed loop's clients released at once: each
    client's first request) against the rest: their share and mean TTFT. The first wave queues for
    one another's prefills, so a few rounds of requests per client can hold most of the mean TTFT.
    Nothing (an empty dict) where at most one request was sent first (an open loop's arrivals)."""
    wave = first_wave(sent)
    if wave.sum() < 2:
        return {}
    rest = ttft[~wave]
    return {
        "first_wave_share_pct": 100.0 * float(wave.mean()),
        "ttft_first_wave_ms": float(np.mean(ttft[wave])) * 1e3,
        "ttft_after_first_wave_ms": float(np.mean(rest)) * 1e3 if len(rest) else float("nan"),
    }


def step_kind_metrics(steps: np.ndarray) -> Dict[str, float]:
    """Mean duration of the steps with prefill work (a prompt or a chunk of one beside any decoding)
    and of the decode-only ones, ms: what an engine's iteration log (TensorRT-LLM `print_iter_log`,
    SGLang's per-batch log) times. A kind no step ran is left out."""
    dur, mixed = steps[:, StepLog.DUR], steps[:, StepLog.MIXED] > 0.0
    out = {}
    for name, sel in (("prefill_step_ms", mixed), ("decode_step_ms", ~mixed)):
        if sel.any():
            out[name] = float(dur[sel].mean()) * 1e3
    return out


def serving_metrics(cfg, design: Design, req: np.ndarray, steps: np.ndarray) -> Dict[str, float]:
    """Every metric of an aggregated serving run from the scheduler's requests and steps."""
    arrival, done = req[:, Req.ARRIVAL], req[:, Req.DONE]
    out_len = req[:, Req.OUTPUT]
    m, tpot = latency_metrics(req)
    dur = steps[:, StepLog.DUR]
    dec = steps[:, StepLog.DECODE]
    m["itl_ms"] = float(np.sum(dur * dec) / max(dec.sum(), 1.0)) * 1e3
    for p, v in zip(PCTS, weighted_percentile(dur, dec, PCTS)):
        m[f"itl_p{p}_ms"] = float(v) * 1e3
    m["itl_max_ms"] = float(req[:, Req.MAX_ITL].max()) * 1e3
    m["queue_ms"] = float(np.mean(req[:, Req.START] - arrival)) * 1e3
    span = float(done.max() - arrival.min())
    busy = float(dur.sum())
    g = parallel.dp_token_scale(cfg)  # the replica's requests per simulated group's (1: one scheduler)
    replicas = parallel.replicas(cfg.hardware)  # tensor_parallel x pipeline_parallel chips each
    m["makespan_s"] = span
    m["n_requests"] = float(len(req))
    m["n_steps"] = float(len(steps))
    m["n_preemptions"] = float(req[:, Req.PREEMPT].sum())
    m["tok_s_aggregate"] = g * float(out_len.sum()) / span
    m["tok_s_system"] = m["tok_s_aggregate"] * replicas
    m["tok_s_user"] = float(np.mean(1.0 / tpot))
    m["requests_per_s"] = g * len(req) / span
    m["busy_pct"] = 100.0 * busy / span
    m["mixed_step_time_pct"] = 100.0 * float(np.sum(dur * steps[:, StepLog.MIXED])) / busy
    m.update(step_kind_metrics(steps))
    m["batch_mean"] = float(np.sum(steps[:, StepLog.SEQS] * dur)) / busy
    m["batch_max"] = float(steps[:, StepLog.SEQS].max())
    m["queue_len_mean"] = float(np.sum(steps[:, StepLog.WAIT] * dur)) / busy
    per_tok = kv_bytes_per_token_chip(design)
    kv = steps[:, StepLog.KV] * per_tok / GIB
    m["kv_mem_mean_gib"] = float(np.sum(kv * dur)) / busy
    m["kv_mem_max_gib"] = float(kv.max())
    m["kv_pool_gib"] = design.memory["kv_pool_bytes"] / GIB
    m["kv_mem_max_pct"] = 100.0 * m["kv_mem_max_gib"] / max(m["kv_pool_gib"], 1e-30)
    m["n_kernel_calls_per_step"] = design.calls_per_step
    # time of each request's decode span by cause (steps after its first token up to its last)
    cum = np.vstack(
        [np.zeros(len(CAUSES)), np.cumsum(steps[:, StepLog.CAUSE : StepLog.CAUSE + len(CAUSES)], 0)]
    )
    f, d = req[:, Req.FIRST_STEP].astype(int), req[:, Req.DONE_STEP].astype(int)
    per_req = (cum[d + 1] - cum[f + 1]) / (out_len - 1.0)[:, None]
    # first and last tokens the engine loop sent after its next launch (scheduler.late_tokens): host
    ends = steps[:, StepLog.START] + steps[:, StepLog.DUR]
    held = (done - ends[d]) - (req[:, Req.FIRST] - ends[f])
    per_req[:, CAUSES.index("host")] += held / (out_len - 1.0)
    for k, cause in enumerate(CAUSES):
        m[f"tpot_{cause}_ms"] = float(per_req[:, k].mean()) * 1e3
        m[f"time_{cause}_pct"] = 100.0 * float(cum[-1, k]) / busy
    for name, used in design.memory["used"].items():
        m[f"mem_{name}_gib"] = used / GIB
        m[f"mem_{name}_pct"] = 100.0 * used / design.memory["capacity"][name]
    # per chip, energy, cost over the makespan: gaps without a step idle (core/cost.py)
    m.update(
        cost.cost_metrics(cfg.hardware, span, cost.busy_seconds(cum[-1]), g * float(out_len.sum()), replicas)
    )
    return m
