"""MoE layers' routed-expert blocks from measured MoE tables (framework/core/moetable.py, docs/model.md
5d): the head op takes the table's block time at its shape, its tails run inside it, the dense and
shared-expert part adds its roofline time; a shape the table lacks keeps the roofline law."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core import moetable
from decodelab.core.build import build
from decodelab.paths import DATA_DIR

VLLM_H100 = "operators/h100_sxm_moe_vllm_0.14.0.parquet"


def _ops(*o):
    d = build(compose_cfg("hardware=h100_sxm", *o))
    return d, {op.name: i for i, op in enumerate(d.ops)}


def test_block_time_is_the_measured_latency():
    """Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128, BF16, one GPU) on the H100
    under vLLM 0.14.0: at 64 and 1024 tokens the head op's time is the table's median latency
    (a monotone stretch: the isotonic fit leaves it), 0.4313 and 0.7224 ms."""
    raw = pd.read_parquet(DATA_DIR / VLLM_H100)
    q = raw[(raw.moe_dtype == "bfloat16") & (raw.hidden_size == 2048) & (raw.inter_size == 768)
            & (raw.num_experts == 128) & (raw.moe_tp_size == 1) & (raw.moe_ep_size == 1)]  # fmt: skip
    d, at = _ops("model=qwen3_30b_a3b", "engine=vllm", "workload=closed_loop")
    head = d.op_lin[at["gate_up_proj"]]
    assert head[K.L_LAW] == K.LAW_GEMM and head[K.L_G_TAB] == 1.0
    for m, ms in ((64, 0.4313), (1024, 0.7224)):
        j = K.M_GRID.index(float(m))
        assert head[K.L_T0] + head[K.L_TAB + j] == pytest.approx(ms * 1e-3, rel=2e-3)
        assert float(q[q.num_tokens == m].latency_ms.iloc[0]) == pytest.approx(ms, rel=2e-3)
    for tail in ("activation", "down_proj"):
        assert d.op_lin[at[tail], K.L_LAW] == K.LAW_SKIP  # inside the head's measured time


def test_dense_and_shared_part_adds_its_roofline_by_hand():
    """DeepSeek-V3 FP8 on 8 GPUs (TensorRT-LLM's table, block-scaled FP8, moe_tp 8): the head op is
    58/61 of the table's block plus the roofline time of the 3 dense layers' and the shared
    expert's part of the block, 1.5x the gate/up op's (gate + up + down over gate + up)."""
    o = ("model=deepseek_v3", "hardware.n_chips=8", "hardware.tensor_parallel=8", "workload.weight_dtype=fp8_block",
         "workload.kv_dtype=fp8", "hardware=h200_sxm")  # fmt: skip
    cfg = compose_cfg(*o)
    d = build(cfg)
    op = next(op for op in d.ops if op.name == "gate_up_proj")
    hw = cfg.hardware
    block = moetable.block_row("operators/h200_sxm_moe_trtllm_1.2.0rc5.parquet", "fp8_block",
                               (7168, 2048, 8, 256, 8, 1))  # fmt: skip
    f_moe, spec = 58 / 61, op.experts_read
    w_ds = 1.5 * (spec[0] + spec[1] * 1)  # dense layers' gate/up + the shared expert's, per chip
    f_ds = 1.5 * (op.flops_per_token - f_moe * 8 * 2 * 7168 * 2 * 2048 / 8)
    m = np.asarray(K.M_GRID)
    rest = np.maximum(
        w_ds / (4800e9 * hw.bw_eff_max), m * f_ds / (hw.peak_tflops_fp8 * 1e12 * hw.compute_eff_max)
    )
    lin = d.op_lin[[op.name for op in d.ops].index("gate_up_proj")]
    got = lin[K.L_T0] + lin[K.L_TAB : K.L_TAB + K.N_MGRID]
    np.testing.assert_allclose(got, f_moe * block + rest, rtol=1e-12)


def test_shape_the_table_lacks_keeps_the_roofline():
    """Qwen3-30B-A3B on 3 GPUs (moe_tp 3: not measured) and any MoE model on a roofline chip keep the
    roofline law for every FFN op."""
    d, at = _ops(
        "model=qwen3_30b_a3b", "hardware.n_chips=4", "hardware.tensor_parallel=4", "model.expert_ffn_dim=760"
    )
    assert all(d.op_lin[at[n], K.L_LAW] == K.LAW_NONE for n in ("gate_up_proj", "activation", "down_proj"))
    sn = build(compose_cfg("hardware=sn40l_node8", "model=qwen3_30b_a3b"))
    assert all(sn.op_lin[i, K.L_LAW] == K.LAW_NONE for i, op in enumerate(sn.ops) if op.moe_block)


def test_bad_moe_table_is_one_line():
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        check_config(compose_cfg("hardware=h100_sxm", "hardware.op_tables.moe=operators/nope.parquet"))
    assert "\n" not in str(e.value) and "hardware.op_tables.moe: operators/nope.parquet: no such file" in str(
        e.value
    )
