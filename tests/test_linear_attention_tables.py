"""Hybrid models' linear-layer kernels from the engines' measured tables (framework/opcost/linear_attn.py): Gated
DeltaNet (Qwen3.5-27B: 16 key / 48 value heads of 128 x 128, conv 4, fp32 state) and Kimi Delta Attention (Kimi-K3:
96 heads of 128, 12 a chip at TP8). Every expected time is a row of the shipped table, as AIConfigurator measured it
(tools/aic_kernel_tables.py), or worked out from two of them."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import assert_serve_matches_reference, compose_cfg
from decodelab.core.build import build
from decodelab.core.reference import cost_context
from decodelab.kernel_layout import Law
from decodelab.opcost import linear_attn, registry
from decodelab.opcost.base import Step
from decodelab.paths import DATA_DIR

QWEN = ("model=qwen3_5_27b", "tracking=off")
K3 = ("model=kimi_k3", "hardware=b300_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
K3 += ("workload.weight_dtype=mxfp4", "tracking=off")


def _ops(*overrides):
    cfg = compose_cfg(*overrides)
    ctx = cost_context(cfg)
    return {op.name: op for op in build(cfg).ops if op.recurrence}, ctx


def _ms(op, ctx, tokens: float) -> float:
    """The op's time at `tokens` on its path (kernel form: t0 + the table beyond it), ms."""
    ps = registry.prices(op, ctx)
    t, t0, _ = registry.reference(op, ctx, ps, Step(tokens))
    return (t + t0) * 1e3


def _raw(chip, engine, role, k, v, kind="gdn"):
    """The shipped table's rows of one kernel shape, latency_ms by its axis."""
    d = pd.read_parquet(DATA_DIR / "operators" / f"{chip}_linear_attention_{engine}.parquet")
    d = d[(d.kind == kind) & (d.role == role) & (d.num_k_heads == k) & (d.num_v_heads == v)]
    return d.set_index(linear_attn.ROLES[role]).latency_ms


def test_gated_deltanet_decode_is_the_engines_row():
    """vLLM 0.24.0 on a B200, Qwen3.5-27B at TP1: the packed recurrent decode at 64 sequences 69.53 us, at 32 37.67 us,
    at 48 (between them, linear) (69.53 + 37.67) / 2 = 53.60 us; the conv update at 64 sequences 4.35 us; the chunked
    prefill of one 4,096-token prompt 174.7 us."""
    ops, ctx = _ops(*QWEN, "hardware=b200_sxm", "engine=vllm_0_19")
    assert ops["gdn_decode"].recurrence == ("gdn", "decode", 16, 48, 128, 128, 4, 4.0)
    assert [p.family for p in registry.prices(ops["gdn_decode"], ctx)] == ["linear_attention"]
    assert _ms(ops["gdn_decode"], ctx, 64) == pytest.approx(0.069533, rel=1e-4)
    assert _ms(ops["gdn_decode"], ctx, 32) == pytest.approx(0.037666, rel=1e-4)
    assert _ms(ops["gdn_decode"], ctx, 48) == pytest.approx((0.069533 + 0.037666) / 2, rel=1e-4)
    assert _ms(ops["conv1d_update"], ctx, 64) == pytest.approx(0.0043466, rel=1e-4)
    assert _ms(ops["gdn_prefill"], ctx, 4096) == pytest.approx(0.174717, rel=1e-4)
    raw = _raw("b200_sxm", "vllm", "decode", 16, 48)
    assert raw[64] == pytest.approx(0.069533, rel=1e-4) and raw[32] == pytest.approx(0.037666, rel=1e-4)


def test_an_engine_without_a_table_reads_the_chips():
    """TensorRT-LLM ships no table (its collector timed a BF16 state and the convolution over the key channels only):
    its designs read the chip's SGLang 0.5.14 rows, 38.00 us at 64 sequences at TP2 (8 / 24 heads a chip)."""
    hw = compose_cfg("hardware=b200_sxm").hardware
    assert "trtllm" not in hw.op_tables.linear_attention_by_engine
    two, ctx = _ops(*QWEN, "hardware=b200_sxm", "hardware.n_chips=2", "hardware.tensor_parallel=2",
                    "engine=trtllm_inferencex")  # fmt: skip
    assert two["gdn_decode"].recurrence[2:4] == (8, 24)
    assert _ms(two["gdn_decode"], ctx, 64) == pytest.approx(0.037997, rel=1e-4)
    assert _raw("b200_sxm", "sglang", "decode", 8, 24)[64] == pytest.approx(0.037997, rel=1e-4)


def test_a_fused_kda_decode_holds_its_convolution():
    """Kimi-K3 at TP8 on a B300 (12 heads a chip): SGLang 0.5.16 timed only its fused decode there (kda_fused_decode,
    16.99 us at 64 sequences), so the conv update op costs nothing (Law.SKIP); vLLM's build timed the two kernels, the
    recurrence 18.62 us."""
    ops, ctx = _ops(*K3, "engine=sglang_0_5_8")
    assert ops["kda_decode"].recurrence == ("kda", "decode", 12, 12, 128, 128, 4, 4.0)
    assert _ms(ops["kda_decode"], ctx, 64) == pytest.approx(0.016989, rel=1e-4)
    assert registry.law_code(registry.prices(ops["conv1d_update"], ctx)) == Law.SKIP
    assert _ms(ops["conv1d_update"], ctx, 64) == 0.0
    vllm, ctx_v = _ops(*K3, "engine=vllm_0_19")
    assert _ms(vllm["kda_decode"], ctx_v, 64) == pytest.approx(0.018621, rel=1e-4)
    assert registry.law_code(registry.prices(vllm["conv1d_update"], ctx_v)) == Law.GEMM


def test_a_bf16_state_reads_the_curve_at_equal_bytes():
    """SGLang's --mamba-ssm-dtype bfloat16 halves the state: Qwen3.5-27B's decode op moves 32,960 B of activations and
    2 x 1,572,864 B of state a sequence, 3,178,688 B, where the tables' fp32 state makes it 6,324,416 B (ratio
    0.502605). 64 sequences read the vLLM curve at 32.167: between its 32 (37.666 us, measured) and 48 (53.600 us,
    halfway to 64's 69.533) points, 37.832 us. The conv update keeps its row (4.347 us at 64)."""
    ops, ctx = _ops(*QWEN, "hardware=b200_sxm", "engine=vllm_0_19", "model.linear_state_dtype=bf16")
    op = ops["gdn_decode"]
    assert op.act_bytes_per_token == 3178688 and linear_attn.state_ratio(op) == pytest.approx(
        0.502605, abs=1e-6
    )
    raw = _raw("b200_sxm", "vllm", "decode", 16, 48)
    at48 = (raw[32] + raw[64]) / 2
    want = raw[32] + (64 * 3178688 / 6324416 - 32) / 16 * (at48 - raw[32])
    assert _ms(op, ctx, 64) == pytest.approx(want, rel=1e-9) and want == pytest.approx(0.037832, abs=1e-6)
    assert _ms(ops["conv1d_update"], ctx, 64) == pytest.approx(0.0043466, rel=1e-4)


def test_shapes_no_table_holds_keep_the_roofline_and_say_so():
    """A Mamba-2 mixer (no recurrence table: TensorRT-LLM's mamba2_perf times only its convolutions) keeps the
    roofline law and the note names it."""
    nano, ctx_n = _ops(
        "model=nemotron_3_nano_30b_a3b", "hardware=h100_sxm", "engine=vllm_0_19", "tracking=off"
    )
    assert registry.prices(nano["ssm_decode"], ctx_n) == ()
    assert (
        "ssm_decode (no op_tables.linear_attention mamba2 decode row at 8/64 heads of 128x64)"
        in registry.note(list(nano.values()), ctx_n)
    )


def test_a_bad_table_is_one_error_line(tmp_path):
    bad = tmp_path / "la.csv"
    pd.DataFrame({"kind": ["gdn"], "role": ["decode"], "latency_ms": [0.1]}).to_csv(bad, index=False)
    hw = compose_cfg(
        "hardware=b200_sxm", f"hardware.op_tables.linear_attention_by_engine.vllm={bad}"
    ).hardware
    assert registry.check(hw) == [
        f"hardware.op_tables.linear_attention_by_engine.vllm: {bad}: not a linear-attention table (misses column(s) "
        "batch_size, seq_len, num_k_heads, num_v_heads, head_k_dim, head_v_dim, d_conv)"
    ]
    hw = compose_cfg("hardware=b200_sxm", "hardware.op_tables.linear_attention=nowhere.parquet").hardware
    assert registry.check(hw) == ["hardware.op_tables.linear_attention: nowhere.parquet: no such file"]


@pytest.mark.parametrize("chip", ["a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300",
                                  "l40s", "rtx_pro_6000_server"])  # fmt: skip
def test_every_chip_reads_its_tables(chip):
    """Every chip's tables load, and each holds Qwen3.5-27B's decode at TP1 for each engine it ships."""
    hw = compose_cfg(f"hardware={chip}").hardware
    t = hw.op_tables
    assert registry.check(hw) == [] and t.linear_attention == t.linear_attention_by_engine.sglang
    for path in t.linear_attention_by_engine.values():
        assert ("gdn", "decode", 16, 48, 128, 128, 4) in linear_attn.curves(path), path


@pytest.mark.parametrize("engine", ["vllm_0_19", "sglang_0_5_8"])
def test_serving_matches_the_reference_with_the_tables(engine):
    cfg = compose_cfg(
        *QWEN, "hardware=b200_sxm", "workload=closed_loop", f"engine={engine}", "workload.concurrency=6",
        "workload.prompt_len=700", "workload.output_len=12",
    )  # fmt: skip
    assert len(assert_serve_matches_reference(cfg)) > 0


def test_a_decode_row_is_never_faster_than_the_hbm_peak():
    """The L40S's 96 MB L2 holds a few sequences' states between the collector's calls: SGLang's decode at TP2 (24
    value heads a chip, 3,145,728 B of fp32 state a sequence) measures 8.67 us at 8 sequences, 3.4x faster than the
    HBM can move them. A serving step reads every layer's states once: the op's 3,162,208 B a sequence (state read and
    written, its activations) x 8 at 864 GB/s = 29.28 us. From 128 sequences (400 MB of state) the table is above
    that floor and is read as measured: 608.08 us."""
    ops, ctx = _ops(
        *QWEN, "hardware=l40s", "hardware.n_chips=2", "hardware.tensor_parallel=2", "engine=sglang_0_5_8"
    )
    op = ops["gdn_decode"]
    assert op.recurrence[2:4] == (8, 24) and op.act_bytes_per_token == 3162208
    assert _raw("l40s", "sglang", "decode", 8, 24)[8] == pytest.approx(0.008672, rel=1e-3)
    assert _ms(op, ctx, 8) == pytest.approx(8 * 3162208 / 864e9 * 1e3, rel=1e-9)
    assert _ms(op, ctx, 128) == pytest.approx(_raw("l40s", "sglang", "decode", 8, 24)[128], rel=1e-9)
