"""The serving front end between the benchmark client and the engine's scheduler (engine.frontend).

A client's request passes the engine's HTTP server, the tokenization of its prompt and the
hand-over to the scheduler before the scheduler can take it, and its first token passes
detokenization and streaming on the way back. The scheduler (scheduler.py) sees each request
`delay` seconds after the client sends it: delay = request_ms + the prompt's text / tokenize_mb_s,
the text being prompt tokens x workload.prompt_bytes_per_token (the whole fixed cost is put on the
request side; the response side adds the same to TTFT).
The requests' arrival column is turned back into the client's send times after the run, so TTFT
and end-to-end latency are timed from the send, as the benchmark client times them; a closed-loop
client sends its next request right after the last token (plus workload.think_ms), and the
scheduler sees it `delay` later."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from decodelab.modes.serving.layout import Req


def delays(engine, workload, prompt: np.ndarray) -> np.ndarray:
    """Seconds from each request's send to its arrival at the scheduler."""
    f = engine.frontend
    text = np.asarray(prompt, dtype=float) * workload.prompt_bytes_per_token  # bytes
    tokenize = text / (f.tokenize_mb_s * 1e6) if f.tokenize_mb_s > 0 else 0.0 * text
    return f.request_ms * 1e-3 + tokenize


def to_scheduler(arrival: np.ndarray, think: np.ndarray, delay: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(arrival, think) as the scheduler sees them: the sends given (NaN: a closed-loop client's
    later request) and the client's delay before each later request, each `delay` later."""
    return arrival + delay, think + delay


def to_client(req: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """The scheduler's request rows with the arrival column back at the client's send times."""
    out = req.copy()
    out[:, Req.ARRIVAL] = out[:, Req.ARRIVAL] - delay
    return out
