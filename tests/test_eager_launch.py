"""Eager kernel launches in static decode (optimizations.cuda_graphs=false on a GPU): each kernel
a call launches is dispatched by the host (engine.eager_launch_us, else hardware.launch_us; the
call's kernels: engine.eager_kernels), enqueued ahead of the GPU, so a step lasts max(N kernels x
L, device time D) (components/execution/gpu.py, core/kernel.py). One mechanism with serving's
eager steps (tests/test_eager_dispatch.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LLAMA8B_H100_PEAK, compose_cfg
from decodelab.components.execution import gpu
from decodelab.core import grid_kernel, kv_costs
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES, Call, Cause
from decodelab.modes.dispatch import evaluate

# Llama-3.1-8B BF16 on one H100, the roofline law with every overhead zeroed (test_golden.py
# ZERO_OVERHEAD) and the Kernel Looping paper's kernels (engine.fused_add_norm=false): 1 + 10 x 32
# + 3 = 324 calls per step. One decode step at a 4096-token context reads the decoder stack and
# LM head (2 x (8,030,261,248 - 525,336,576) B), 4096 tokens of KV (x 131,072 B) and writes one
# token's KV: 15,546,851,328 B / 3.35 TB/s = 4.6408 ms (+ < 0.1 % of activations). The 32 attention
# calls launch 2 kernels each (default.yaml eager_kernels): 356 kernels launched.
N = 1 + 10 * 32 + 3
NK = N + 32
D_HAND = 15_546_851_328 / 3.35e12
BASE = LLAMA8B_H100_PEAK


def _m(*ov):
    res = evaluate(compose_cfg(*BASE, *ov))
    assert res["status"] == "ok", res["reason"]
    return res["metrics"]


def test_eager_launch_by_hand():
    """L = 20 us: the host needs 356 x 20 us = 7.12 ms > D = 4.64 ms, so the step is exactly 7.12 ms
    and launch_sync holds 7.12 ms - D. L = 10 us: 3.56 ms < D, hidden: the step is D, as with CUDA
    graphs (the old per-kernel rule, max(0, L - kernel) summed, exposed ~10 us on each of the
    sub-microsecond norm / RoPE / activation / residual kernels of every layer). CUDA graphs on: D
    for any L."""
    on = _m("optimizations.cuda_graphs=true", "engine.eager_launch_us=20")
    d = on["tpot_ms"] * 1e-3
    assert d == pytest.approx(D_HAND, rel=1e-3) and d >= D_HAND
    assert on["tpot_launch_sync_ms"] == 0.0
    assert _m("optimizations.cuda_graphs=true", "engine.eager_launch_us=1000")["tpot_ms"] == on["tpot_ms"]

    slow = _m("optimizations.cuda_graphs=false", "engine.eager_launch_us=20")
    assert slow["n_kernel_calls_per_step"] == N == 324
    assert slow["tpot_ms"] == pytest.approx(NK * 20e-3, rel=1e-12)  # 7.12 ms
    assert slow["tpot_launch_sync_ms"] == pytest.approx(NK * 20e-3 - d * 1e3, rel=1e-9)
    assert slow["tpot_memory_ms"] == pytest.approx(on["tpot_memory_ms"], rel=1e-12)

    hidden = _m("optimizations.cuda_graphs=false", "engine.eager_launch_us=10")
    assert NK * 10e-6 < d
    assert hidden["tpot_ms"] == pytest.approx(on["tpot_ms"], rel=1e-12)
    assert hidden["tpot_launch_sync_ms"] == 0.0


def test_null_engine_figure_is_the_bare_launch():
    """engine.eager_launch_us=null (vLLM): each kernel's dispatch is hardware.launch_us. 1 ms each:
    356 ms per step; the default 4 us (1.4 ms in all) hides under D."""
    m = _m("optimizations.cuda_graphs=false", "engine.eager_launch_us=null", "hardware.launch_us=1000")
    assert m["tpot_ms"] == pytest.approx(NK * 1.0, rel=1e-12)
    on = _m("optimizations.cuda_graphs=true")
    m = _m("optimizations.cuda_graphs=false", "engine.eager_launch_us=null")
    assert m["tpot_ms"] == pytest.approx(on["tpot_ms"], rel=1e-12)


def test_one_per_call_figure_for_static_and_serving():
    """The call costs carry the engine's dispatch (the figure serving's eager steps use,
    modes/serving/simulate.py Eng.EAGER_HOST) without CUDA graphs, nothing with them; a dataflow
    chip's launches are its own."""
    cfg = compose_cfg("optimizations.cuda_graphs=false")
    assert cfg.engine.eager_launch_us == 35  # conf/engine/default.yaml (TensorRT-LLM PyTorch flow)
    assert gpu.eager_dispatch_us(cfg.hardware, cfg.engine) == 35.0
    d = build(cfg)
    kernels = np.array([c["eager_kernels"] for c in d.calls])
    np.testing.assert_array_equal(d.call_cost[:, Call.LAUNCH_ASYNC], 35e-6 * kernels)
    assert (build(compose_cfg()).call_cost[:, Call.LAUNCH_ASYNC] == 0.0).all()
    vllm = compose_cfg("engine=vllm", "optimizations.cuda_graphs=false")
    assert (build(vllm).call_cost[:, Call.LAUNCH_ASYNC] == vllm.hardware.launch_us * 1e-6).all()
    sn = compose_cfg("hardware=sn40l_node8", "optimizations=none")
    assert (build(sn).call_cost[:, Call.LAUNCH_ASYNC] == 0.0).all()


def test_negative_dispatch_is_one_error():
    with pytest.raises(ConfigError) as e:
        build(compose_cfg("optimizations.cuda_graphs=false", "engine.eager_launch_us=-1"))
    assert str(e.value) == "engine.eager_launch_us=-1.0 must be >= 0 (null: hardware.launch_us per call)"


def test_default_h100_gap_between_graphs_and_eager():
    """The issue's case: Llama-3.1-8B on one H100, the default engine and laws (260 calls; the 32
    attention calls launch 2 kernels each, engine.eager_kernels: 292 launched). With CUDA graphs the
    step is its kernels (~6.7 ms); without, 292 x 35 us = 10.22 ms of dispatch outlasts them: TPOT =
    10.22 ms + the 0.1 ms host step."""
    on = evaluate(compose_cfg())["metrics"]
    off = evaluate(compose_cfg("optimizations.cuda_graphs=false"))["metrics"]
    assert on["n_kernel_calls_per_step"] == off["n_kernel_calls_per_step"] == 260
    assert on["tpot_ms"] < 292 * 0.035
    assert off["tpot_ms"] == pytest.approx(292 * 0.035 + 0.1, rel=1e-9)


@pytest.mark.parametrize("pp", [1, 2])
def test_kernel_matches_reference_host_bound(pp):
    """Host-bound and device-bound rows of one request (the KV read grows along it), with and
    without pipeline stages (every call of a host-bound micro-batch waits on its launches alike)."""
    cfg = compose_cfg(
        "model=llama3_1_8b",
        "hardware=dgx_h100",
        "hardware.tensor_parallel=1",
        f"hardware.pipeline_parallel={pp}",
        "optimizations.cuda_graphs=false",
        "engine.eager_launch_us=30",
        "workload.batch_size=32",
        "workload.prompt_len=1000",
        "workload.output_len=64",
    )
    d = build(cfg)
    w = cfg.workload
    steps = K.request_steps(w.batch_size, w.prompt_len, w.output_len)
    steps = np.vstack([steps[:2], [[1.0, 60000.0, 32.0, 1.0, 0.0]]])
    out = K.simulate(*d.arrays(), steps)
    ref = reference_simulate(d, cfg, steps)
    for r, row in enumerate(ref):
        for k, cause in enumerate(CAUSES):
            assert out[r, k] == pytest.approx(row[cause], rel=1e-9, abs=1e-15), (r, cause)


def test_grid_closed_form_across_the_host_bound_boundary():
    """The decode grid's closed-form sums (core/grid_kernel.py) split a run where its steps go from
    host-bound to device-bound (a per-step branch): equal to the row-by-row walk. The dispatch per
    call is set midway between the first and the last decode step's device time / calls."""
    base = (
        "model=llama3_1_8b",
        "hardware=h100_sxm",
        "hardware.op_model=roofline",
        "workload.batch_size=32",
        "workload.prompt_len=1000",
        "workload.output_len=3000",
    )
    on_cfg = compose_cfg(*base)
    on = build(on_cfg)
    w = on_cfg.workload
    steps = kv_costs.attended_rows(
        K.request_steps(w.batch_size, w.prompt_len, w.output_len), w.prompt_len, on
    )
    dev = K.simulate(*on.arrays(), steps)[1:]
    dev = dev.sum(1) - dev[:, Cause.HOST]
    calls = float(np.sum(on.call_rep * np.array([c["eager_kernels"] for c in on.calls])))  # kernels
    mid_us = (dev[0] + dev[-1]) / 2 / calls * 1e6
    d = build(compose_cfg(*base, "optimizations.cuda_graphs=false", f"engine.eager_launch_us={mid_us}"))
    per_row = K.simulate(*d.arrays(), steps)[1:]
    exposed = per_row.sum(1) - per_row[:, Cause.HOST] - dev
    np.testing.assert_allclose(exposed, np.maximum(0.0, calls * mid_us * 1e-6 - dev), rtol=1e-9, atol=1e-15)
    assert exposed[0] > 0 and exposed[-1] == 0  # the boundary lies inside the run
    bws = np.array([d.tier_bw, d.tier_bw * 0.37, d.tier_bw * 3.1])
    args = (d.op_call, d.op_w, d.op_lin, d.call_rep, d.call_cost, bws, d.kv_frac, d.hw, steps)
    _, dec_c, _ = grid_kernel.decode_grid(*args, False)
    _, dec_w, _ = grid_kernel.decode_grid(*args, True)
    np.testing.assert_allclose(dec_c, dec_w, rtol=1e-12, atol=1e-12 * dec_w.sum(1).max())
    np.testing.assert_allclose(dec_w[0], per_row.sum(0), rtol=1e-13, atol=0)
