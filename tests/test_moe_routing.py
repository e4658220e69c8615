"""An MoE table's block under serving's routing (framework/opcost/moe.py `served`): the tables were
timed with balanced routing (min(E, n k) distinct experts), a served step routes each token's top-k
on its own (E (1 - (1 - k/E)^n) distinct experts, the busiest rank's under expert parallelism)."""

from __future__ import annotations

import numpy as np
import pytest
from decodelab.components.models.experts import busiest_chip_experts
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import moe_blocks

BW, PEAK = 4.8e12, 1979e12  # H200: HBM bytes/s, dense FP8 FLOP/s
DSV3_TP8 = (7168, 2048, 8, 256, 8, 1)  # DeepSeek-V3's block: hidden, expert FFN, top-8 of 256, moe_tp 8
EXPERT = 3 * 7168 * 2048 / 8 / BW  # one expert's gate, up and down on one of 8 ranks, FP8: 1.147 us


def synthetic(shape) -> np.ndarray:
    """A block that streams experts at half the peak after a 40 us fixed cost: 40 us + 2 ideal(n)."""
    return 40e-6 + 2.0 * moe_blocks.ideal("fp8_block", shape, BW, PEAK)


def at(row: np.ndarray, n: int) -> float:
    return float(row[M_GRID.index(float(n))])


def test_32_tokens_of_deepseek_read_163_experts_not_256():
    """32 tokens x top-8 = 256 assignments: balanced routing reads all 256 experts (40 + 2 x 256 x
    1.147 = 627.2 us); served, 256 (1 - (31/32)^32) = 163.31 of them, so the block streams 92.7
    experts fewer at its rate of 2 s per ideal s: 40 + 2 x 163.3 x 1.147 = 414.6 us."""
    block = synthetic(DSV3_TP8)
    assert at(block, 32) == pytest.approx(40e-6 + 2 * 256 * EXPERT, rel=1e-9)
    got = moe_blocks.served(block, "fp8_block", DSV3_TP8, BW, PEAK)
    assert at(got, 32) == pytest.approx(40e-6 + 2 * 163.31 * EXPERT, rel=1e-4)
    assert at(got, 32) * 1e6 == pytest.approx(414.6, abs=0.1)


def test_one_token_and_thousands_read_what_the_table_read():
    """One token reads its k experts either way; 1024 tokens read every expert either way."""
    block = synthetic(DSV3_TP8)
    got = moe_blocks.served(block, "fp8_block", DSV3_TP8, BW, PEAK)
    assert at(got, 1) == pytest.approx(at(block, 1), rel=1e-12)
    assert at(got, 1024) == pytest.approx(at(block, 1024), rel=1e-9)
    assert np.all(np.diff(got) >= 0) and np.all(got <= block * (1 + 1e-12))


def test_expert_parallel_ranks_wait_for_the_busiest():
    """moe_ep 8 (32 whole experts a rank, one expert 8 x 1.147 us): balanced routing gives each rank
    one of a token's 8 experts; served, the busiest rank's expected count, sum over j >= 1 of
    1 - F(j - 1)^8 with F Binomial(32, 1/32) (0.362, 0.736, 0.922, 0.983, 0.997, ...) = 2.545: the
    block streams 1.545 experts more at its rate of 2."""
    shape = (7168, 2048, 8, 256, 1, 8)
    busiest = busiest_chip_experts(256, 8, 1.0, 8)
    assert busiest == pytest.approx(2.545, abs=0.005)
    block = synthetic(shape)
    got = moe_blocks.served(block, "fp8_block", shape, BW, PEAK)
    assert at(got, 1) == pytest.approx(at(block, 1) + 2 * (busiest - 1) * 8 * EXPERT, rel=1e-9)


def test_a_measured_rate_below_the_peak_is_read_from_the_table():
    """DeepSeek's block under SGLang 0.5.9 on the H200 (AIConfigurator's table, block-scaled FP8):
    51.9 us at 1 token, 458.1 us at 32 (all 256 experts, ideal 9.2 and 293.6 us): 1.428 s per ideal
    s; at 32 tokens served 458.1 - 1.428 x (293.6 - 187.3) = 306.3 us."""
    block = moe_blocks.block_row("operators/h200_sxm_moe_sglang_0.5.9.parquet", "fp8_block", DSV3_TP8)
    assert at(block, 1) * 1e6 == pytest.approx(51.9, abs=0.1)
    assert at(block, 32) * 1e6 == pytest.approx(458.1, abs=0.1)
    got = moe_blocks.served(block, "fp8_block", DSV3_TP8, BW, PEAK)
    assert at(got, 32) * 1e6 == pytest.approx(306.3, abs=0.3)
