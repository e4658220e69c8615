"""MoE layers' routed-expert blocks from measured MoE tables (framework/opcost/moe.py, docs/model.md,
"MoE decode step"): the head op takes the table's block time at its shape, its tails run inside it,
the dense and shared-expert part adds its roofline time; a shape or split the tables lack is carried
from the nearest measured block, a dtype they lack keeps the roofline law."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core.build import build
from decodelab.kernel_layout import M_GRID, N_MGRID, Law, Lin
from decodelab.opcost import moe as moetable
from decodelab.opcost import moe_blocks
from decodelab.opcost.base import hbm_bw, peak
from decodelab.paths import DATA_DIR

VLLM_H100 = "operators/h100_sxm_moe_vllm_0.14.0.parquet"


def _ops(*o):
    d = build(compose_cfg("hardware=h100_sxm", *o))
    return d, {op.name: i for i, op in enumerate(d.ops)}


def test_block_time_is_the_measured_latency():
    """Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128, BF16, one GPU) on the H100
    under vLLM 0.14.0: at 1 and 1024 tokens the head op's time is the table's median latency
    (a monotone stretch: the isotonic fit leaves it), 0.0505 and 0.7224 ms: there serving's routing
    reads what the table's balanced routing read (k experts, all of them; moe_blocks.served)."""
    raw = pd.read_parquet(DATA_DIR / VLLM_H100)
    q = raw[(raw.moe_dtype == "bfloat16") & (raw.hidden_size == 2048) & (raw.inter_size == 768)
            & (raw.num_experts == 128) & (raw.moe_tp_size == 1) & (raw.moe_ep_size == 1)]  # fmt: skip
    d, at = _ops("model=qwen3_30b_a3b", "engine=vllm", "workload=closed_loop")
    head = d.op_lin[at["gate_up_proj"]]
    assert head[Lin.LAW] == Law.GEMM and head[Lin.G_TAB] == 1.0
    for m, ms in ((1, 0.05046), (1024, 0.7224)):
        j = M_GRID.index(float(m))
        assert head[Lin.T0] + head[Lin.TAB + j] == pytest.approx(ms * 1e-3, rel=2e-3)
        assert float(q[q.num_tokens == m].latency_ms.iloc[0]) == pytest.approx(ms, rel=2e-3)
    for tail in ("activation", "down_proj"):
        assert d.op_lin[at[tail], Lin.LAW] == Law.SKIP  # inside the head's measured time


def test_dense_and_shared_part_adds_its_roofline_by_hand():
    """DeepSeek-V3 FP8 on 8 GPUs (TensorRT-LLM's table, block-scaled FP8, moe_tp 8): the head op is
    58/61 of the table's block (under serving's routing, moe_blocks.served) plus the roofline time of the 3
    dense layers' and the shared expert's part of the block, 1.5x the gate/up op's (gate + up + down
    over gate + up)."""
    o = ("model=deepseek_v3", "hardware.n_chips=8", "hardware.tensor_parallel=8", "workload.weight_dtype=fp8_block",
         "workload.kv_dtype=fp8", "hardware=h200_sxm")  # fmt: skip
    cfg = compose_cfg(*o)
    d = build(cfg)
    op = next(op for op in d.ops if op.name == "gate_up_proj")
    hw = cfg.hardware
    block = moe_blocks.block_row("operators/h200_sxm_moe_trtllm_1.2.0rc5.parquet", "fp8_block",
                               (7168, 2048, 8, 256, 8, 1))  # fmt: skip
    block = moe_blocks.served(
        block, "fp8_block", (7168, 2048, 8, 256, 8, 1), hbm_bw(hw), peak(hw, "fp8_block")
    )
    f_moe, spec = 58 / 61, op.experts_read
    w_ds = 1.5 * spec[0]  # dense layers' gate/up + the shared expert's, per chip (read every step)
    assert spec[0] == pytest.approx(3 / 61 * 7168 * 2 * 18432 / 8 + f_moe * 7168 * 2 * 2048 / 8, rel=1e-12)
    f_ds = 1.5 * (op.flops_per_token - f_moe * 8 * 2 * 7168 * 2 * 2048 / 8)
    m = np.asarray(M_GRID)
    rest = np.maximum(
        w_ds / (4800e9 * hw.bw_eff_max), m * f_ds / (hw.peak_tflops_fp8 * 1e12 * hw.compute_eff_max)
    )
    lin = d.op_lin[[op.name for op in d.ops].index("gate_up_proj")]
    got = lin[Lin.T0] + lin[Lin.TAB : Lin.TAB + N_MGRID]
    np.testing.assert_allclose(got, f_moe * block + rest, rtol=1e-12)


def test_shape_the_table_lacks_is_carried_from_the_nearest_measured_block():
    """Qwen3-30B-A3B with an expert FFN of 760 (the tables hold 768) on 4 GPUs under TensorRT-LLM: the
    head op takes the measured block of FFN 768 at moe_tp 4: its fixed part f (its one-token time beyond
    its ideal one-token time) plus the rest times ideal(760) / ideal(768) = 760 / 768 at every token
    count (both the weights read and the FLOPs scale with the FFN width), under serving's routing
    (moe_blocks.served); its tails run inside it, and the design's note names the block it came from."""
    d, at = _ops(
        "model=qwen3_30b_a3b", "hardware.n_chips=4", "hardware.tensor_parallel=4", "model.expert_ffn_dim=760"
    )
    block = moe_blocks.block_row(
        "operators/h100_sxm_moe_trtllm_1.2.0rc5.parquet", "bf16", (2048, 768, 8, 128, 4, 1)
    )
    head = d.op_lin[at["gate_up_proj"]]
    assert head[Lin.LAW] == Law.GEMM and head[Lin.G_TAB] == 1.0
    got = head[Lin.T0] + head[Lin.TAB : Lin.TAB + N_MGRID]
    hw = compose_cfg("hardware=h100_sxm").hardware
    bw, pk = hbm_bw(hw), peak(hw, "bf16")
    f = block[0] - moe_blocks.ideal("bfloat16", (2048, 768, 8, 128, 4, 1), bw, pk)[0]
    assert 0 < f < block[0]
    want = moe_blocks.served(f + (block - f) * 760 / 768, "bfloat16", (2048, 760, 8, 128, 4, 1), bw, pk)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert all(d.op_lin[at[n], Lin.LAW] == Law.SKIP for n in ("activation", "down_proj"))
    assert any("MoE block carried from the nearest one measured (bfloat16, hidden 2048, expert FFN 768, "
               "top-8 of 128, moe_tp 4, moe_ep 1" in n for n in d.notes)  # fmt: skip


def test_nearest_block_same_gpus_then_split_and_shape(tmp_path):
    """Wanted FFN 1536 at moe_tp 8 x moe_ep 1 (8 GPUs): 4 x 2 (same GPUs and shape, split 1 log2 step
    away: distance 1) beats FFN 1024 at 8 x 1 (shape 0.58 steps, counted twice: 1.17); without it,
    1 x 8 (split 3 steps) beats 4 x 1 (4 GPUs: 100); and FFN 1024 at 8 x 1 beats 4 x 1 too."""
    rows = [
        dict(
            moe_dtype="bfloat16",
            num_tokens=n,
            hidden_size=4096,
            inter_size=f,
            topk=8,
            num_experts=128,
            moe_tp_size=tp,
            moe_ep_size=ep,
            latency_ms=0.01 * n * scale,
        )
        for n in (1, 2, 4, 8, 16, 32, 64, 128)
        for f, tp, ep, scale in ((1536, 4, 2, 1.0), (1536, 1, 8, 0.8), (1536, 4, 1, 1.5), (1024, 8, 1, 0.9))
    ]
    for keep, want in (
        (None, (1536, 4, 2)),
        ({(1536, 1, 8), (1536, 4, 1)}, (1536, 1, 8)),
        ({(1536, 4, 1), (1024, 8, 1)}, (1024, 8, 1)),
    ):
        sel = [
            r for r in rows if keep is None or (r["inter_size"], r["moe_tp_size"], r["moe_ep_size"]) in keep
        ]
        path = tmp_path / f"t{len(sel)}_{want[0]}_{want[1]}.parquet"
        pd.DataFrame(sel).to_parquet(path)
        key = moe_blocks.nearest(str(path), "bf16", (4096, 1536, 8, 128, 8, 1))
        assert (key[2], key[5], key[6]) == want


def test_ideal_block_time_by_hand():
    """One rank of a block of hidden 4096, expert FFN 1536, top-8 of 128, moe_tp 8, BF16, at 4.8 TB/s
    and 989 TFLOP/s: 1 token activates 8 experts of 3 x 4096 x 192 weights each, 37.7 MB, 7.86 us
    (FLOPs 37.7 MFLOP, 0.04 us); 1024 tokens activate all 128 (604 MB, 126 us) and do 2 x 2.36 M x
    8192 = 38.7 GFLOP (39.1 us): the read is longer."""
    t = moe_blocks.ideal("bfloat16", (4096, 1536, 8, 128, 8, 1), 4.8e12, 989e12)
    m = list(M_GRID)
    assert t[m.index(1.0)] == pytest.approx(8 * 3 * 4096 * 192 * 2 / 4.8e12, rel=1e-12)
    assert t[m.index(1024.0)] == pytest.approx(128 * 3 * 4096 * 192 * 2 / 4.8e12, rel=1e-12)


def test_dtype_no_table_holds_keeps_the_roofline():
    """NVFP4 experts on the H100 (no H100 MoE table holds the dtype) and any MoE model on a roofline
    chip keep the roofline law for every FFN op."""
    d, at = _ops("model=qwen3_30b_a3b", "workload.weight_dtype=nvfp4")
    assert all(d.op_lin[at[n], Lin.LAW] == Law.NONE for n in ("gate_up_proj", "activation", "down_proj"))
    sn = build(compose_cfg("hardware=sn40l_node8", "model=qwen3_30b_a3b"))
    assert all(sn.op_lin[i, Lin.LAW] == Law.NONE for i, op in enumerate(sn.ops) if op.moe_block)


def test_block_scaled_fp8_the_table_lacks_takes_the_fp8_block():
    """TensorRT-LLM 1.3.0rc10's B300 table holds DeepSeek-V3's block (hidden 7168, expert FFN 2048,
    top-8 of 256, moe_tp 8) in per-tensor FP8 but not block-scaled: a block-scaled FP8 design takes
    the FP8 block as measured (the same weight bytes, ideal ratio 1) instead of the roofline law
    (8 us per layer at one token, where the FP8 block measures ~55 us), and the note says so. The
    note names a dtype no table holds (NVFP4 on the H100) for what it is, not "not a plain GEMM"."""
    o = ("model=deepseek_v3", "hardware=b300_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8",
         "workload.weight_dtype=fp8_block", "workload.kv_dtype=fp8")  # fmt: skip
    d = build(compose_cfg(*o))
    path = "operators/b300_sxm_moe_trtllm_1.3.0rc10.parquet"
    shape = (7168, 2048, 8, 256, 8, 1)
    assert moe_blocks.block_row(path, "fp8_block", shape) is None
    fp8 = moe_blocks.block_row(path, "fp8", shape)
    head = next(op for op in d.ops if op.name == "gate_up_proj")
    block, source, _ = moetable.block_of(head, [path], "fp8_block", 7.7e12, 4.5e15)
    np.testing.assert_array_equal(block, fp8)
    assert source == (path, ("fp8", *shape))
    assert fp8[0] * 1e6 > 40.0
    assert any("carried from the nearest one measured (fp8, hidden 7168" in n for n in d.notes)
    d2 = build(compose_cfg("hardware=h100_sxm", "model=qwen3_30b_a3b", "workload.weight_dtype=nvfp4"))
    assert any("gate_up_proj (no nvfp4 block in the MoE tables)" in n for n in d2.notes)


def test_bad_moe_table_is_one_line():
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        check_config(compose_cfg("hardware=h100_sxm", "hardware.op_tables.moe=operators/nope.parquet"))
    assert "\n" not in str(e.value) and "hardware.op_tables.moe: operators/nope.parquet: no such file" in str(
        e.value
    )


def test_a_block_that_repeats_a_split_on_fewer_gpus_is_left_out(tmp_path):
    """moe_ep 2 measured as moe_ep 1 to within 2% at every token count (the split not applied: half
    the weights and FLOPs per rank cannot take the same time) is left out, and a design on it is
    carried from moe_ep 1 (its fixed part, the one-token time beyond ideal, kept; the rest at ideal(ep 2) /
    ideal(ep 1)); moe_ep 4, measured lower, stays."""
    ns = (1, 2, 4, 8, 16, 32, 64, 128)
    rows = [
        dict(
            moe_dtype="bfloat16",
            num_tokens=n,
            hidden_size=2880,
            inter_size=2880,
            topk=4,
            num_experts=128,
            moe_tp_size=1,
            moe_ep_size=ep,
            latency_ms=(0.05 + 0.01 * n) * scale,
        )
        for n in ns
        for ep, scale in ((1, 1.0), (2, 1.01), (4, 0.5))
    ]
    path = tmp_path / "moe.parquet"
    pd.DataFrame(rows).to_parquet(path)
    keys = {k[6] for k in moe_blocks.curves(str(path))}
    assert keys == {1, 4}
    row, key = moe_blocks.near_row(str(path), "bf16", (2880, 2880, 4, 128, 1, 2), 8e12, 2.25e15)
    assert key[6] == 1  # moe_ep 1 and 4 are both 1 log2 step of GPUs from 2 (distance 100): key order
    one = moe_blocks.block_row(str(path), "bf16", (2880, 2880, 4, 128, 1, 1))
    have = moe_blocks.ideal("bfloat16", (2880, 2880, 4, 128, 1, 1), 8e12, 2.25e15)
    ratio = moe_blocks.ideal("bfloat16", (2880, 2880, 4, 128, 1, 2), 8e12, 2.25e15) / have
    f = one[0] - have[0]  # 60 us at one token; ideal: 4 experts' BF16 weights (199 MB) at 8 TB/s, 24.9 us
    assert abs(f - (60e-6 - 4 * 3 * 2880 * 2880 * 2 / 8e12)) < 1e-9
    np.testing.assert_allclose(row, f + (one - f) * ratio, rtol=1e-12)


@pytest.mark.parametrize(
    "extra, rows",
    [((), "w4a8_mxfp4_mxfp8"), (("engine.moe_mxfp4=w4a16",), "w4a16_mxfp4")],
)
def test_mxfp4_experts_run_with_the_engines_activations(extra, rows):
    """gpt-oss-120b (MXFP4 experts, hidden 2880, expert FFN 2880, top-4 of 128, no dense layers or
    shared experts) on one GB200 under TensorRT-LLM: its engine file runs MXFP4 experts with MXFP8
    activations on a chip with FP4 units (engine.moe_mxfp4 w4a8), so the head op is the table's
    w4a8_mxfp4_mxfp8 block; with w4a16 it is the w4a16_mxfp4 block, 3-4x slower there (1024 tokens:
    every expert read, as balanced routing reads them)."""
    d = build(compose_cfg("hardware=gb200", "model=gpt_oss_120b", "workload.weight_dtype=mxfp4", *extra))
    head = d.op_lin[[op.name for op in d.ops].index("gate_up_proj")]
    raw = pd.read_parquet(DATA_DIR / "operators/gb200_moe_trtllm_1.3.0rc10.parquet")
    q = raw[(raw.moe_dtype == rows) & (raw.hidden_size == 2880) & (raw.num_experts == 128)
            & (raw.moe_tp_size == 1) & (raw.moe_ep_size == 1) & (raw.num_tokens == 1024)]  # fmt: skip
    j = M_GRID.index(1024.0)
    assert head[Lin.T0] + head[Lin.TAB + j] == pytest.approx(float(q.latency_ms.median()) * 1e-3, rel=0.05)


@pytest.mark.parametrize("engine", ["default", "sglang_0_5_8"])
def test_b200_mxfp4_experts_take_the_1_3_0rc10_rows(engine):
    """TensorRT-LLM 1.2.0rc5 measured no MXFP4 experts on the B200; the chip's table carries
    1.3.0rc10's (the oldest version that measured them there). gpt-oss-120b on one B200 runs w4a8
    under TensorRT-LLM and under SGLang 0.5.8 (its FlashInfer MXFP4 runner on Blackwell), whose own
    0.5.9 table holds no MXFP4 block either: both take the 1.3.0rc10 w4a8 block (1024 tokens: the
    table's median latency), not the roofline law; on an H200 SGLang runs w4a16."""
    d = build(
        compose_cfg(
            "hardware=b200_sxm", "model=gpt_oss_120b", "workload.weight_dtype=mxfp4", f"engine={engine}"
        )
    )
    head = d.op_lin[[op.name for op in d.ops].index("gate_up_proj")]
    assert head[Lin.G_TAB] == 1.0
    raw = pd.read_parquet(DATA_DIR / "operators/b200_sxm_moe_trtllm_1.2.0rc5_mxfp4_1.3.0rc10.parquet")
    q = raw[(raw.moe_dtype == "w4a8_mxfp4_mxfp8") & (raw.hidden_size == 2880) & (raw.num_experts == 128)
            & (raw.moe_tp_size == 1) & (raw.moe_ep_size == 1) & (raw.num_tokens == 1024)]  # fmt: skip
    j = M_GRID.index(1024.0)
    assert head[Lin.T0] + head[Lin.TAB + j] == pytest.approx(float(q.latency_ms.median()) * 1e-3, rel=0.05)
    assert compose_cfg("hardware=h200_sxm", f"engine={engine}").engine.moe_mxfp4 == "w4a16"


def test_bad_moe_mxfp4_is_one_line():
    from decodelab.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        build(
            compose_cfg(
                "hardware=gb200", "model=gpt_oss_120b", "workload.weight_dtype=mxfp4", "engine.moe_mxfp4=w8"
            )
        )
    assert str(e.value) == "engine.moe_mxfp4='w8' is not one of: w4a16, w4a8"
