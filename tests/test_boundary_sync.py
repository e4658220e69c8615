"""A stack's extra synchronisation at every kernel boundary (engine.boundary_sync_us; the papers' GPU
stack conf/engine/trtllm_2024.yaml): every GPU kernel call pays it, a call costed by a fitted law
(whose in-graph t0 replaces hardware.sync_us) as well (components/execution/gpu.py, core/build.py,
core/reference.py)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate
from test_eager_launch import BASE, D_HAND, N


def _m(*ov):
    res = evaluate(compose_cfg(*ov))
    assert res["status"] == "ok", res["reason"]
    return res["metrics"]


def test_boundary_sync_by_hand_on_the_roofline_law():
    """324 calls per step (test_eager_launch.py), each paying 3 us more: the decode step is the
    memory time D plus 324 x 3 us = 0.972 ms, all of it launch_sync."""
    plain = _m(*BASE, "engine.boundary_sync_us=0")
    more = _m(*BASE, "engine.boundary_sync_us=3")
    assert plain["tpot_ms"] * 1e-3 == pytest.approx(D_HAND, rel=1e-3)
    assert more["n_kernel_calls_per_step"] == N
    assert more["tpot_ms"] - plain["tpot_ms"] == pytest.approx(N * 3e-3, rel=1e-9)
    assert more["tpot_launch_sync_ms"] - plain["tpot_launch_sync_ms"] == pytest.approx(N * 3e-3, rel=1e-9)


FITTED = (
    "model=llama3_1_8b",
    "hardware=dgx_h100",
    "engine=trtllm_2024",
    "workload.batch_size=1",
    "workload.prompt_len=4095",
    "workload.output_len=2",
)


def test_law_costed_calls_pay_it_beside_their_t0():
    """Under the fitted laws every call's t0 holds hardware.sync_us; the engine's boundary still
    adds to every call: the step grows by calls x boundary exactly."""
    zero = _m(*FITTED, "engine.boundary_sync_us=0")
    two = _m(*FITTED, "engine.boundary_sync_us=2")
    n = two["n_kernel_calls_per_step"]
    assert n > 300  # ~10 kernels per layer, the residual add its own (trtllm_2024.yaml)
    assert two["tpot_ms"] - zero["tpot_ms"] == pytest.approx(n * 2e-3, rel=1e-9)


def test_kernel_matches_reference_with_a_boundary():
    cfg = compose_cfg(*FITTED, "engine.boundary_sync_us=2.5", "workload.output_len=8")
    d = build(cfg)
    w = cfg.workload
    steps = K.request_steps(w.batch_size, w.prompt_len, w.output_len)
    out = K.simulate(*d.arrays(), steps)
    ref = reference_simulate(d, cfg, steps)
    for r, row in enumerate(ref):
        for k, cause in enumerate(CAUSES):
            assert out[r, k] == pytest.approx(row[cause], rel=1e-9, abs=1e-15), (r, cause)


def test_measured_engines_pay_none_and_a_negative_one_is_one_error():
    assert compose_cfg("engine=default").engine.boundary_sync_us == 0.0
    with pytest.raises(ConfigError, match="boundary_sync_us"):
        build(compose_cfg(*FITTED, "engine.boundary_sync_us=-1"))
