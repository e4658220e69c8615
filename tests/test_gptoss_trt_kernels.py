"""gpt-oss-120b's decoder layer as TensorRT-LLM runs it (docs/journal, notes gptoss_trt_b200): under tensor
parallelism the residual add + RMSNorm run inside the layer's two all-reduces (model.allreduce_norm_engines,
components/models/dense.py norm_ops), and the MoE layer's routing decision runs inside the fused MoE
block its measured table timed (framework/opcost/moe.py route_price)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.core.build import build
from decodelab.core.reference import reference_step
from decodelab.kernel_layout import Law, Lin

B200 = ("model=gpt_oss_120b", "hardware=b200_sxm", "workload.weight_dtype=mxfp4", "workload=closed_loop")


def _design(*o):
    d = build(compose_cfg(*B200, *o))
    return d, {op.name: i for i, op in enumerate(d.ops)}


def _names(*o):
    return [op.name for op in _design(*o)[0].ops]


def test_tensor_parallel_trtllm_has_no_norm_kernels_of_its_own():
    """TP2 under TensorRT-LLM: no input_norm / residual_norm (inside the all-reduces); the one norm
    kernel left is the final norm op (layer 0's input norm in count). TP1, vLLM at TP2 and TensorRT-LLM
    with attention DP keep both (forward_normal; vLLM's own model code)."""
    fused = _names("engine=default", "hardware.n_chips=2", "hardware.tensor_parallel=2")
    assert "input_norm" not in fused and "residual_norm" not in fused
    assert fused.count("final_norm") == 1 and {"attn_allreduce", "mlp_allreduce"} <= set(fused)
    for o in (
        ("engine=default",),
        ("engine=vllm", "hardware.n_chips=2", "hardware.tensor_parallel=2"),
        ("engine=default", "hardware.n_chips=2", "hardware.tensor_parallel=2", "hardware.attention_dp=2"),
    ):
        names = _names(*o)
        assert "input_norm" in names and "residual_norm" in names, o


def test_routing_inside_the_trtllm_moe_block_only():
    """The route op is skipped (Law.SKIP) where TensorRT-LLM's table prices the block, a kernel of its
    own (no law: the roofline) under vLLM, whose table was timed from given top-k ids."""
    d, at = _design("engine=default")
    assert d.op_lin[at["route"], Lin.LAW] == Law.SKIP
    assert d.op_lin[at["gate_up_proj"], Lin.LAW] == Law.GEMM
    d, at = _design("engine=vllm")
    assert d.op_lin[at["route"], Lin.LAW] == Law.NONE


def test_decode_step_loses_exactly_the_fused_kernels():
    """TP8, 4 sequences at 5,000 tokens of context (2.215 ms): the step is shorter by what those kernels
    cost alone, each a roofline call of sync_us = 2 us plus its bytes at the ramp of bw_half_mb = 7.2 MB
    (~1 us): a norm 3.014 us (2 a layer: +0.217 ms over 36 layers, 2.432 ms), the route 3.000 us (+0.108 ms
    with the route kernel of its own, 2.540 ms)."""
    cfg = compose_cfg(*B200, "engine=default", "hardware.n_chips=8", "hardware.tensor_parallel=8")
    fused = sum(reference_step(build(cfg), cfg, 1.0, 5000.0, 4.0).values())
    cfg.model.allreduce_norm_engines = []
    no_norm_fusion = sum(reference_step(build(cfg), cfg, 1.0, 5000.0, 4.0).values())
    cfg.engine.family = "other"  # neither the fusion nor the TensorRT-LLM table's routing (same tables)
    plain = sum(reference_step(build(cfg), cfg, 1.0, 5000.0, 4.0).values())
    assert no_norm_fusion - fused == pytest.approx(36 * 2 * 3.0136e-6, rel=1e-3)
    assert plain - no_norm_fusion == pytest.approx(36 * 3.0002e-6, rel=1e-3)
