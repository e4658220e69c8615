"""The static decode mode: one batch of `workload.batch_size` sequences, a prefill of
`prompt_len` tokens, then `output_len - 1` decode steps, each costed by the kernel."""

from __future__ import annotations

from decodelab.core import kernel as K
from decodelab.core import kv_costs
from decodelab.core.build import Design
from decodelab.core.metrics import metrics
from decodelab.core.result import Result


def evaluate_static(cfg, design: Design, keep_steps: bool = True) -> Result:
    w = cfg.workload
    steps = kv_costs.attended_rows(
        K.request_steps(w.batch_size, w.prompt_len, w.output_len), w.prompt_len, design
    )  # KV policy, layer kinds (kv_costs.py)
    out = K.simulate(*design.arrays(), steps)
    out[0] += w.batch_size * design.kv_prefill_s  # KV-policy selection at prefill (TTFT)
    m = metrics(
        cfg,
        design,
        out[0],
        out[1:].sum(0),
        w.output_len - 1.0,
        w.prompt_len + w.output_len / 2.0,
        design.memory,
    )
    res = Result("ok", metrics=m, notes=list(design.notes))
    if keep_steps:
        res.steps, res.times = steps, out
    return res
