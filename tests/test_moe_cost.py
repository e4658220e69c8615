"""MoE decode costs against hand-worked values (components/models/experts.py,
components/execution/dataflow.py): the expert weights a step gathers, the routing decision as a
kernel on a GPU and as a pipeline boundary inside a fused (and looped) dataflow layer."""

from __future__ import annotations

import pytest
from decodelab.components.execution import dataflow
from decodelab.components.models import layers
from decodelab.components.ops import Op
from decodelab.kernel_layout import Cause
from decodelab.modes.dispatch import evaluate

R1 = ("model=deepseek_r1", "hardware=sn40l_rack16", "workload.weight_dtype=fp8", "optimizations=all")


@pytest.mark.parametrize("batch", [1, 4, 16])
def test_moe_gather_bytes_per_chip(compose, batch):
    """DeepSeek-R1 at TP16, FP8 (1 B/weight): each of the 58 MoE layers reads the gate/up
    (7168 x 2 x 2048/16) and down (2048/16 x 7168) slices of the expected distinct routed experts
    E (1 - (1 - k/E)^n) = 256 (1 - (31/32)^n) plus the shared expert; the 3 dense layers read
    their 18432/16-column FFN. Batch 1: 8 routed + 1 shared."""
    m = compose("model=deepseek_r1").model
    ops = {o.name: o for o in layers.build_ops(m, 16, 1.0, 2.0, 2.0, tokens_per_step=batch)}
    routed = 256 * (1 - (31 / 32) ** batch)
    if batch == 1:
        assert routed == pytest.approx(8.0)
    per_expert = 3 * 7168 * 128  # 2,752,512 B per chip
    dense = 3 * 7168 * 1152
    gathered = ops["gate_up_proj"].weight_bytes * 61 + ops["down_proj"].weight_bytes * 61
    assert gathered == pytest.approx(58 * (routed + 1) * per_expert + 3 * dense, rel=1e-12)
    # every expert is held: 58 x 257 experts + the dense FFNs
    held = (ops["gate_up_proj"].resident_bytes + ops["down_proj"].resident_bytes) * 61
    assert held == pytest.approx(58 * 257 * per_expert + 3 * dense, rel=1e-12)


def test_one_routing_decision_per_moe_layer(compose):
    m = compose("model=deepseek_r1").model
    route = [o for o in layers.build_ops(m, 16, 1.0, 2.0, 2.0) if o.route_point]
    assert len(route) == 1 and route[0].repeat == 58  # 61 layers, 3 dense
    assert route[0].flops_per_token == 4 * 256
    dense = compose("model=llama3_1_8b").model
    from decodelab.components.models import dense as dense_arch

    assert not any(o.route_point for o in dense_arch.build_ops(dense, 1, 2.0, 2.0, 2.0))


def test_routing_splits_the_looped_layer(compose):
    """With Kernel Looping the layer kernel's launch and fill/drain are paid once per step, but
    the routing boundary is its own call paid per MoE layer: launch (hardware orchestrator, 1 us)
    + route_fill_us (30 us)."""
    hw = compose("hardware=sn40l_rack16").hardware
    opt = compose("optimizations=all").optimizations
    ops = [
        Op("norm", "norm", repeat=58, act_bytes_per_token=4.0),
        Op("route", "elementwise", repeat=58, act_bytes_per_token=8.0, route_point=True),
        Op("experts", "gemm", repeat=58, act_bytes_per_token=8.0),
    ]
    ops, calls, _ = dataflow.assign_calls(ops, hw, opt)
    assert [op.call for op in ops] == [0, 1, 0]
    assert calls[0]["launch_once"] > 0 and calls[0]["fill_each"] == 0.0  # looped
    assert calls[1]["repeat"] == 58 and calls[1]["launch_once"] == 0.0
    assert calls[1]["fill_each"] == pytest.approx(30e-6)
    assert calls[1]["launch_each"] == pytest.approx(1e-6)
    assert ops[1].act_bytes_per_token == 8.0  # first (only) op of its call keeps its traffic


def test_route_fill_moves_deepseek_decode_by_its_hand_worked_amount(compose):
    """58 MoE layers x 30 us = 1.74 ms per decode step (fill_drain), nothing else moves."""
    on = evaluate(compose(*R1), keep_steps=False)["metrics"]
    off = evaluate(compose(*R1, "hardware.route_fill_us=0"), keep_steps=False)["metrics"]
    assert on["tpot_fill_drain_ms"] - off["tpot_fill_drain_ms"] == pytest.approx(58 * 0.030, rel=1e-6)
    assert on["tpot_ms"] - off["tpot_ms"] == pytest.approx(58 * 0.030, rel=1e-6)
    assert on["n_kernel_calls_per_step"] == 3 + 58  # 3 looped programs + 58 routing boundaries
    # SambaNova's public single-user figures (198 tok/s, DAC 2025 talk; > 250 tok/s, SambaNova blog)
    # are a held-out check, not a target: 4k context, no MTP
    assert on["tok_s_user"] == pytest.approx(210.4, rel=0.01)
    assert off["tok_s_user"] == pytest.approx(327.3, rel=0.01)  # 331.9 with an FP8 LM head


def test_routing_is_one_more_gpu_kernel_per_moe_layer(compose):
    """On a GPU the top-k is its own kernel between the router GEMM and the expert GEMMs (one call
    per operator): Mixtral-8x7B (32 MoE layers) at TP8, roofline operator law."""
    base = ("model=mixtral_8x7b", "hardware=dgx_h100", "hardware.op_model=roofline")
    m = evaluate(compose(*base), keep_steps=False)["metrics"]
    # embedding + 32 x (norm, qkv, rope, attn, o, ar, norm, router, route, gate_up, act, down, ar)
    # + final norm, LM head, sampling (the default engine adds the residual inside the next norm)
    assert m["n_kernel_calls_per_step"] == 1 + 32 * 13 + 3


def test_expert_parallel_busiest_chip():
    """DeepSeek-R1 on 16 chips, 16 whole experts each. Batch 1: p = 8/256 = 1/32 per expert,
    per-chip count Binomial(16, 1/32): F(0) = (31/32)^16 = 0.6017, F(1) = F(0) + 16/32 (31/32)^15
    = 0.9123, F(2) = 0.9874, F(3) = 0.9988; E[max] = (1 - F(0)^16) + (1 - F(1)^16) + (1 - F(2)^16)
    + (1 - F(3)^16) + ... = 0.9997 + 0.7703 + 0.1829 + 0.0198 + 0.0017 = 1.975. A seeded Monte
    Carlo of the exact routing (8 distinct of 256 per token) gives 2.02 (batch 1), 4.42 (4),
    15.83 (64)."""
    from decodelab.components.models.experts import busiest_chip_experts

    assert busiest_chip_experts(256, 8, 1, 16) == pytest.approx(1.975, abs=0.002)
    assert busiest_chip_experts(256, 8, 4, 16) == pytest.approx(4.42, rel=0.03)
    assert busiest_chip_experts(256, 8, 64, 16) == pytest.approx(15.83, rel=0.03)
    assert busiest_chip_experts(256, 8, 1, 1) == pytest.approx(8.0)  # one chip: all of them


def test_expert_parallel_gather_bytes(compose):
    """Per chip and MoE layer, FP8: `tp` reads (8 + 1 shared) x 2,752,512 B (1/16 of each expert);
    `ep` reads 1.975 whole experts (44,040,192 B each) + 1/16 of the shared one: 3.5x more at batch 1."""
    m = compose("model=deepseek_r1").model
    per16 = 3 * 7168 * 128
    dense = 3 * 7168 * 1152
    for mapping, routed16 in (("tp", 8.0), ("ep", 16 * 1.9751)):
        ops = {o.name: o for o in layers.build_ops(m, 16, 1.0, 2.0, 2.0, 1, moe_mapping=mapping)}
        read = (ops["gate_up_proj"].weight_bytes + ops["down_proj"].weight_bytes) * 61
        assert read == pytest.approx(58 * (routed16 + 1) * per16 + 3 * dense, rel=1e-4)
        held = (ops["gate_up_proj"].resident_bytes + ops["down_proj"].resident_bytes) * 61
        assert held == pytest.approx(58 * 257 * per16 + 3 * dense, rel=1e-12)


def test_repeated_identical_layer_launch(compose):
    """SN40L paper VI-C reading: a fused layer program called 32 times under software orchestration
    pays the full launch once and `repeat_launch_us` for each of the 31 repeats; at 1 us a repeat
    the step saves 31 x (repeat_launch_us - 1) us (31 x 207.4 us = 6.429 ms at the C9:4
    calibration, 208.4 us); the call count stays."""
    base = (
        "model=llama2_7b",
        "hardware=sn40l_node8",
        "optimizations=none",
        "optimizations.fusion=layer",
        "optimizations.orchestration=software",
        "workload.prompt_len=1920",
    )
    full = evaluate(compose(*base), keep_steps=False)["metrics"]
    reuse = evaluate(compose(*base, "hardware.repeat_launch_us=1"), keep_steps=False)["metrics"]
    repeat_ms = compose(*base).hardware.repeat_launch_us / 1000.0
    saved = full["tpot_launch_sync_ms"] - reuse["tpot_launch_sync_ms"]
    assert saved == pytest.approx(31 * (repeat_ms - 0.001), rel=1e-6)
    assert full["n_kernel_calls_per_step"] == reuse["n_kernel_calls_per_step"]
    # hardware orchestration ignores it (every call is launched on chip)
    hw = ("optimizations.orchestration=hardware",)
    a = evaluate(compose(*base, *hw), keep_steps=False)["metrics"]
    b = evaluate(compose(*base, *hw, "hardware.repeat_launch_us=1"), keep_steps=False)["metrics"]
    assert a["tpot_ms"] == b["tpot_ms"]


@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_expert_read_follows_the_steps_tokens(compose, batch):
    """The kernel reads the experts a step's own tokens activate, not those of the design's
    workload.batch_size: a design built at batch 1 and costed at `batch` decode tokens reads
    DeepSeek-R1's expected E (1 - (31/32)^n) + 1 experts per MoE layer (grid points: exact), as the
    design built at that batch does."""
    from decodelab.core import kernel as K
    from decodelab.core.build import build

    def decode_memory(built_at: int) -> float:
        cfg = compose(*R1, f"workload.batch_size={built_at}")
        d = build(cfg)
        steps = K.request_steps(batch, 1024, 2)[1:2]  # one decode step of `batch` sequences
        rows = K.simulate(
            d.op_call, d.op_w, d.op_lin, d.call_rep, d.call_cost, d.tier_bw, d.kv_frac, d.hw, steps
        )
        return float(rows[0, Cause.MEMORY] + rows[0, Cause.EXCESS])

    assert decode_memory(1) == pytest.approx(decode_memory(batch), rel=1e-9)


def test_serving_moe_reads_the_experts_of_its_batch(compose):
    """A serving run's decode steps hold many sequences: its TPOT does not depend on
    workload.batch_size (a static-run field), which used to fix the experts read at one token's."""
    base = (
        "model=qwen3_30b_a3b",
        "engine=vllm",
        "workload=closed_loop",
        "workload.concurrency=32",
        "workload.prompt_len=256",
        "workload.output_len=32",
        "workload.n_requests=64",
    )
    tpot = [evaluate(compose(*base, f"workload.batch_size={b}"))["metrics"]["tpot_ms"] for b in (1, 32)]
    assert tpot[0] == pytest.approx(tpot[1], rel=1e-9)
