"""The serving front end between the benchmark client and the engine's scheduler (engine.frontend).

A client's request passes the engine's HTTP server, the tokenization of its prompt and the
hand-over to the scheduler before the scheduler can take it, and its first token passes
detokenization and streaming on the way back. The scheduler (scheduler.py) sees each request
`delay` seconds after the client sends it: delay = request_ms + the prompt's text / tokenize_mb_s,
the text being prompt tokens x workload.prompt_bytes_per_token (the whole fixed cost is put on the
request side; the response side adds the same to TTFT). Under engine.frontend.tokenize_serial a
request also waits for the tokenization of the prompts sent before it that are still being
tokenized (one thread, first come first served), for the requests whose send is known before the
run: every request of an open loop, the first of each closed-loop client (sent together at t = 0);
a closed loop's later requests, spread over the run, are charged no wait. A disaggregated
deployment's requests pass its router, not the engine's server (Dynamo's own front end for
InferenceX's runs), whose queue is not modelled: the disaggregated modes charge no wait either.
The requests' arrival column is turned back into the client's send times after the run, so TTFT
and end-to-end latency are timed from the send, as the benchmark client times them; a closed-loop
client sends its next request right after the last token (plus workload.think_ms), and the
scheduler sees it `delay` later."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from decodelab.modes.serving.layout import Req


def delays(engine, workload, prompt: np.ndarray, sent=None) -> np.ndarray:
    """Seconds from each request's send to its arrival at the scheduler; `sent` the send times
    (NaN: not known before the run), for a serial tokenizer's queue."""
    f = engine.frontend
    text = np.asarray(prompt, dtype=float) * workload.prompt_bytes_per_token  # bytes
    tokenize = text / (f.tokenize_mb_s * 1e6) if f.tokenize_mb_s > 0 else np.zeros_like(text)
    wait = queued(np.asarray(sent, dtype=float), tokenize) if f.tokenize_serial and sent is not None else 0.0
    return f.request_ms * 1e-3 + tokenize + wait


def queued(sent: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Each request's wait for one first-come-first-served server busy with the requests sent
    before it, `work` seconds each; a request of unknown send (NaN) neither waits nor delays."""
    wait = np.zeros(len(work))
    known = np.flatnonzero(np.isfinite(sent))
    free = -np.inf
    for i in known[np.argsort(sent[known], kind="stable")]:
        start = max(sent[i], free)
        wait[i], free = start - sent[i], start + work[i]
    return wait


def to_scheduler(arrival: np.ndarray, think: np.ndarray, delay: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(arrival, think) as the scheduler sees them: the sends given (NaN: a closed-loop client's
    later request) and the client's delay before each later request, each `delay` later."""
    return arrival + delay, think + delay


def to_client(req: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """The scheduler's request rows with the arrival column back at the client's send times."""
    out = req.copy()
    out[:, Req.ARRIVAL] = out[:, Req.ARRIVAL] - delay
    return out
