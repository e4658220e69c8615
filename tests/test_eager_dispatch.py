"""The engine's host dispatch of an eager step (engine.eager_launch_us): a GPU step that replays no
CUDA graph has each of its kernels launched by the engine's host thread, so the step's kernels (its
calls, some launching several: engine.eager_kernels) x eager_launch_us is host work of that step
(framework/modes/serving/scheduler.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compose_cfg, one_client_cfg
from decodelab.core.build import build
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES, Call
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, StepLog

# Llama-3.1-8B (the default model), TP1, the default engine: embedding + 32 layers x 9 calls (input
# norm with the residual add, QKV, RoPE/KV write, attention, O, residual norm, gate/up, activation,
# down) + final norm + LM head + sampling = 292 kernel calls per step; the attention call launches 2
# kernels (TensorRT-LLM's attention op: BuildDecoderInfo and the FMHA / XQA kernel; default.yaml
# eager_kernels): 324 kernels.
CALLS = 1 + 32 * 9 + 3
KERNELS = CALLS + 32


def _steps(*ov, p=1000, o=4):
    cfg = one_client_cfg("engine.host_iter_us=0", "engine.host_per_req_us=0", *ov, p=p, o=o)
    design = build(cfg)
    assert float(np.sum(design.call_rep)) == CALLS
    _, steps, *_ = S.simulate_serving(cfg, design)
    pre = steps[steps[:, StepLog.PREFILL] > 0]
    dec = steps[steps[:, StepLog.PREFILL] == 0]
    return pre[:, StepLog.DUR], dec[:, StepLog.DUR], steps


def _host(steps):
    return steps[:, StepLog.CAUSE + CAUSES.index("host")]


@pytest.mark.parametrize("overlap", ["false", "true"])
def test_eager_dispatch_golden(overlap):
    """One client, one 1000-token prompt. With eager_launch_us 0 the prefill step is its GPU time
    g (no per-call launch either). At 1000 us per kernel the host needs 324 x 1 ms = 324 ms, far
    over g: the step lasts exactly 324 ms, overlap or not. At 1e-4 us per kernel (32.4 ns) it hides
    under the GPU. Decode-only steps replay a CUDA graph: unchanged."""
    g, dec0, _ = _steps(f"engine.overlap={overlap}", "engine.eager_launch_us=0")
    big, dec1, steps = _steps(f"engine.overlap={overlap}", "engine.eager_launch_us=1000")
    assert len(g) == 1 and g[0] < 0.1
    np.testing.assert_allclose(big, KERNELS * 1e-3, rtol=1e-12)
    pre_host = _host(steps[steps[:, StepLog.PREFILL] > 0])
    np.testing.assert_allclose(pre_host, KERNELS * 1e-3 - g, rtol=1e-9)
    np.testing.assert_allclose(dec1, dec0, rtol=1e-12)
    small, _, _ = _steps(f"engine.overlap={overlap}", "engine.eager_launch_us=0.0001")
    np.testing.assert_allclose(small, g, rtol=1e-12)


@pytest.mark.slow
def test_dispatch_adds_to_the_loop_host_work_under_overlap():
    """Overlap: the step lasts max(GPU, host_iter + dispatch); without overlap the loop's own host
    work adds to the step and only the dispatch beyond the GPU time shows (issued while the
    forward's kernels run). host_iter 50 ms, 100 us per kernel -> dispatch 32.4 ms."""
    g, _, _ = _steps("engine.overlap=false", "engine.eager_launch_us=0")
    d = KERNELS * 100e-6
    on, _, _ = _steps("engine.overlap=true", "engine.eager_launch_us=100", "engine.host_iter_us=50000")
    np.testing.assert_allclose(on, max(g[0], 50e-3 + d), rtol=1e-12)
    off, _, _ = _steps("engine.overlap=false", "engine.eager_launch_us=100", "engine.host_iter_us=50000")
    np.testing.assert_allclose(off, g[0] + 50e-3 + max(0.0, d - g[0]), rtol=1e-12)


def test_without_cuda_graphs_every_step_is_dispatched():
    """optimizations.cuda_graphs=false: decode steps launch eagerly too, each 324 x 1 ms."""
    _, dec, _ = _steps("optimizations.cuda_graphs=false", "engine.eager_launch_us=1000")
    np.testing.assert_allclose(dec, KERNELS * 1e-3, rtol=1e-12)


def test_null_keeps_the_hardware_per_call_launch():
    """eager_launch_us null: each call of an eager step pays hardware.launch_us per kernel where it
    exceeds the kernel (the per-call rule of components/execution/gpu.py), and no step-level dispatch."""
    cfg = compose_cfg("workload=closed_loop", "engine.eager_launch_us=null")
    design = build(cfg)
    p = S.prepare(cfg, design)
    assert p["eng"][Eng.EAGER_HOST] == 0.0
    mixed_cost = p["kernel_args"][5]
    kernels = np.array([c["eager_kernels"] for c in design.calls])
    assert sorted(set(kernels)) == [1.0, 2.0]  # the attention call launches 2
    np.testing.assert_array_equal(mixed_cost[:, Call.LAUNCH_ASYNC], cfg.hardware.launch_us * 1e-6 * kernels)
    cfg = compose_cfg("workload=closed_loop", "engine.eager_launch_us=35")
    p = S.prepare(cfg, build(cfg))
    assert p["eng"][Eng.EAGER_HOST] == pytest.approx(KERNELS * 35e-6, rel=1e-12)
    assert (p["kernel_args"][5][:, Call.LAUNCH_ASYNC] == 0.0).all()


def test_negative_eager_launch_is_one_error():
    cfg = compose_cfg("workload=closed_loop", "engine.eager_launch_us=-1")
    with pytest.raises(ConfigError) as e:
        S.simulate_serving(cfg, build(cfg))
    assert str(e.value) == "engine.eager_launch_us=-1.0 must be >= 0 (null: hardware.launch_us per call)"
