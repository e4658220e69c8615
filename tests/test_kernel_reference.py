"""The Numba kernel (framework/core/kernel.py) against the independent pure-Python reference
(framework/core/reference.py), cause by cause, over random designs and random step rows."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import DATAFLOW_HARDWARE, HARDWARE, MODELS, OPTIMIZATIONS, compose_cfg
from decodelab.core.build import build
from decodelab.core.kernel import request_steps, simulate
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError, Infeasible
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

REL, ABS = 1e-9, 1e-15
SETTINGS = settings(
    max_examples=300 if os.environ.get("DECODELAB_NIGHTLY") else 30,  # the default run's budget
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@st.composite
def designs(draw):
    model = draw(st.sampled_from(MODELS))
    hardware = draw(st.sampled_from(HARDWARE))
    opt = draw(st.sampled_from(OPTIMIZATIONS))
    cfg = compose_cfg(f"model={model}", f"hardware={hardware}", f"optimizations={opt}")
    w = cfg.workload
    w.batch_size = draw(st.integers(1, 64))
    w.prompt_len = draw(st.integers(1, 8192))
    w.output_len = draw(st.integers(2, 64))
    w.weight_dtype = draw(st.sampled_from(["bf16", "bf16", "fp8", "int4", "fp32"]))
    w.kv_dtype = draw(st.sampled_from(["bf16", "fp8"]))
    # host round trips over several steps are checked on their own below
    cfg.optimizations.schedule_offloading = 1
    return cfg


@st.composite
def step_rows(draw):
    n = draw(st.integers(1, 4))
    rows = []
    for _ in range(n):
        q = draw(st.integers(1, 512))
        ctx = q + draw(st.integers(0, 16384))
        seqs = draw(st.integers(1, 64))
        out = draw(st.sampled_from([1, q]))  # a prefill / decode row, or a verification
        prefill = draw(st.booleans())  # the sequences take the prefill op path
        rows.append((float(q), float(ctx), float(seqs), float(out), float(prefill)))
    return np.array(rows)


def _build_or_skip(cfg):
    try:
        return build(cfg)
    except (ConfigError, Infeasible):
        assume(False)


def _assert_match(out, ref):
    assert out.shape == (len(ref), len(CAUSES))
    for r, row in enumerate(ref):
        assert set(row) == set(CAUSES)
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=REL, abs_tol=ABS), (
                r,
                cause,
                out[r, k],
                row[cause],
            )


@pytest.mark.slow
@SETTINGS
@given(cfg=designs(), extra=step_rows())
def test_kernel_matches_reference(cfg, extra):
    design = _build_or_skip(cfg)
    w = cfg.workload
    # the request's own rows (prefill + decode steps) and a few arbitrary ones
    steps = np.vstack([request_steps(w.batch_size, w.prompt_len, w.output_len)[:3], extra])
    out = simulate(*design.arrays(), steps)
    _assert_match(out, reference_simulate(design, cfg, steps))


@pytest.mark.slow
@SETTINGS
@given(cfg=designs(), extra=step_rows())
def test_kernel_causes_nonnegative_and_sum_to_step_total(cfg, extra):
    design = _build_or_skip(cfg)
    out = simulate(*design.arrays(), extra)
    assert out.shape == (len(extra), len(CAUSES)) == (len(extra), 7)
    assert np.all(np.isfinite(out))
    assert np.all(out >= 0.0)
    # every step takes time: at least the weights of the step have to be read
    assert np.all(out.sum(axis=1) > 0.0)
    # the step total is the sum of the causes: the same total the reference gets
    ref = reference_simulate(design, cfg, extra)
    for r, row in enumerate(ref):
        assert out[r].sum() == pytest.approx(sum(row.values()), rel=REL, abs=ABS)


@pytest.mark.parametrize(
    "model, hardware",
    [
        ("llama3_1_8b", "h100_sxm"),
        ("llama3_1_70b", "dgx_h100"),
        ("llama3_1_70b", "sn40l_socket"),  # weights and KV spill to DDR (stated placement policy)
        ("qwen2_5_72b", "sn40l_rack16"),
    ],
)
def test_evaluate_metrics_are_the_cause_sums(compose, model, hardware):
    res = evaluate(
        compose(
            f"model={model}",
            f"hardware={hardware}",
            "workload.output_len=16",
            "workload.kv_placement=spill_ddr",
        )
    )
    assert res["status"] == "ok"
    m, times = res["metrics"], res["times"]
    assert times.shape == (16, len(CAUSES))  # prefill + 15 decode steps
    assert np.all(times >= 0)
    row_total = times.sum(axis=1)
    assert m["ttft_ms"] == pytest.approx(row_total[0] * 1e3, rel=1e-12)
    assert m["tpot_ms"] == pytest.approx(row_total[1:].mean() * 1e3, rel=1e-12)
    assert m["tpot_ms"] == pytest.approx(sum(m[f"tpot_{c}_ms"] for c in CAUSES), rel=1e-12)
    assert m["ttft_ms"] == pytest.approx(sum(m[f"ttft_{c}_ms"] for c in CAUSES), rel=1e-12)
    assert m["tok_s_user"] == pytest.approx(1e3 / m["tpot_ms"], rel=1e-12)
    assert m["tok_s_aggregate"] == pytest.approx(m["tok_s_user"] * 1, rel=1e-12)  # batch 1


@pytest.mark.parametrize("hardware", DATAFLOW_HARDWARE)
def test_kernel_matches_reference_with_schedule_offloading(compose, hardware):
    cfg = compose(
        "model=llama3_1_8b",
        f"hardware={hardware}",
        "optimizations=all",
        "optimizations.schedule_offloading=20",
    )
    design = build(cfg)
    steps = request_steps(4, 1024, 4)
    _assert_match(simulate(*design.arrays(), steps), reference_simulate(design, cfg, steps))
