"""Mean step duration by kind (framework/modes/serving/metrics.py step_kind_metrics): steps with
prefill work against decode-only ones, worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from decodelab.kernel_layout import CAUSES
from decodelab.modes.serving.layout import StepLog
from decodelab.modes.serving.metrics import step_kind_metrics


def steps_of(durations_s, mixed):
    steps = np.zeros((len(durations_s), StepLog.size))
    steps[:, StepLog.DUR] = durations_s
    steps[:, StepLog.MIXED] = mixed
    return steps


def test_each_kind_by_hand():
    # two prefill steps of 90 and 110 ms, three decode steps of 10, 12 and 14 ms
    m = step_kind_metrics(steps_of([0.090, 0.010, 0.012, 0.110, 0.014], [1, 0, 0, 1, 0]))
    assert m["prefill_step_ms"] == pytest.approx(100.0)
    assert m["decode_step_ms"] == pytest.approx(12.0)


def test_a_kind_no_step_ran_is_left_out():
    assert step_kind_metrics(steps_of([0.2, 0.3], [1, 1])) == {"prefill_step_ms": pytest.approx(250.0)}
    assert set(step_kind_metrics(steps_of([0.01], [0]))) == {"decode_step_ms"}


def test_a_closed_loop_run_adds_up():
    """Llama-3.1-8B on one H100, 8 clients: the busy time in steps with prefill work over their mean
    and the rest over the decode-only mean count every step the run took, each kind a whole number."""
    from decodelab.api import evaluate

    m = evaluate("tracking=off", "workload=closed_loop", "workload.concurrency=8").metrics
    busy_ms = m["busy_pct"] / 100.0 * m["makespan_s"] * 1e3
    share = m["mixed_step_time_pct"] / 100.0
    n_prefill = share * busy_ms / m["prefill_step_ms"]
    n_decode = (1.0 - share) * busy_ms / m["decode_step_ms"]
    assert n_prefill == pytest.approx(round(n_prefill), abs=1e-6) and n_prefill >= 1
    assert n_prefill + n_decode == pytest.approx(m["n_steps"], rel=1e-9)
    assert m["prefill_step_ms"] > m["decode_step_ms"] > 0.0


def test_the_summary_prints_both_or_a_dash():
    from decodelab.output.serving import serving_rows

    base = {
        k: 1.0
        for k in (
            "n_requests n_steps n_preemptions tok_s_aggregate tok_s_system tok_s_user batch_mean batch_max "
            "kv_mem_mean_gib kv_mem_max_gib kv_pool_gib queue_ms mixed_step_time_pct"
        ).split()
    }
    base.update({f"tpot_{c}_ms": 0.0 for c in CAUSES} | {f"time_{c}_pct": 0.0 for c in CAUSES})
    rows = dict(serving_rows({**base, "prefill_step_ms": 125.154, "decode_step_ms": 8.106}))
    assert rows["step mean, with prefill / decode only"] == "125.15 / 8.11 ms"
    assert dict(serving_rows({**base, "decode_step_ms": 8.0}))["step mean, with prefill / decode only"] == (
        "- / 8.00 ms"
    )
