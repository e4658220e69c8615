"""The collectors' grouped top-k on DeepSeek's block (framework/opcost/moe_routing.py): which experts rank 0
read in the measured rows, worked by hand, and the served block the tables' rows then give."""

from __future__ import annotations

import pytest
from decodelab.kernel_layout import M_GRID
from decodelab.opcost.moe_blocks import block_kernels, block_row, ideal, served
from decodelab.opcost.moe_routing import balanced_hot, collected, grouped_route, is_grouped, routing_of
from decodelab.paths import DATA_DIR

DSK = (7168, 2048, 8, 256)
SGL = str(DATA_DIR / "operators" / "b200_sxm_moe_sglang_0.5.9.parquet")


def test_balanced_logits_put_one_expert_in_each_group():
    """4 tokens, stride 32: token t takes 8t + 32j (one expert in each 32-wide group)."""
    assert balanced_hot(4, 256, 8).tolist() == [[8 * t + 32 * j for j in range(8)] for t in range(4)]
    assert balanced_hot(40, 256, 8)[33].tolist() == [(33 + 32 * j) % 256 for j in range(8)]


def test_ties_take_the_lowest_groups_and_experts():
    """Every group scores the same, so groups 0-3: token 0's hot experts 0, 32, 64, 96 and the
    lowest-index others 1, 2, 3, 4; token 1's hot 8, 40, 72, 104 and 0, 1, 2, 3."""
    sel = grouped_route(4, 256, 8)
    assert sorted(sel[0].tolist()) == [0, 1, 2, 3, 4, 32, 64, 96]
    assert sorted(sel[1].tolist()) == [0, 1, 2, 3, 8, 40, 72, 104]


@pytest.mark.parametrize(
    "tokens, ep, experts, assignments",
    [
        (1, 1, 8, 8),
        (1, 4, 6, 6),  # experts 0, 32 and 1-4 lie in 0-63
        (1, 8, 5, 5),  # 0 and 1-4 (balanced: 1)
        (1, 64, 4, 4),  # 0-3
        (1, 256, 1, 1),
        (4, 8, 8, 20),  # hot 0, 8, 16, 24 and 0-4; 5 per token (balanced: 4 and 4)
        (4, 1, 20, 32),  # 16 hot and 1-4 (balanced: 32)
        (32, 1, 128, 256),  # groups 0-3 only (balanced: all 256)
        (1024, 8, 32, 5120),  # 5 of each token's 8 on rank 0
    ],
)
def test_rank_zero_counts(tokens, ep, experts, assignments):
    hits, assigns = collected((*DSK, 8 // ep if ep <= 8 else 1, ep))
    i = M_GRID.index(tokens)
    assert (hits[i], assigns[i]) == (experts, assignments)


def test_which_rows_were_grouped():
    """SGLang 0.5.14's TRTLLM-gen rows at DeepSeek's block only; TensorRT-LLM's min-latency rows at every
    block; a block holding any other kernel's rows, or GLM-5's block (one group), is balanced."""
    assert is_grouped(("sglang_flashinfer_trtllm_moe",), (*DSK, 8, 1))
    assert not is_grouped(("sglang_flashinfer_trtllm_moe",), (6144, 2048, 8, 256, 8, 1))
    assert is_grouped(("moe_torch_flow_min_latency",), (6144, 2048, 8, 256, 8, 1))
    assert not is_grouped(("moe_torch_flow_min_latency", "moe_torch_flow_cutlass"), (*DSK, 8, 1))
    assert not is_grouped((), (*DSK, 8, 1))
    assert routing_of(("moe_torch_flow_cutlass",), (*DSK, 8, 1)) is None


def test_the_served_block_of_deepseek_at_4_tokens():
    """B200, block-scaled FP8, TRTLLM-gen (SGLang 0.5.14's rows): the table reads 41.7 us at moe_tp 8 and
    82.6 us at moe_ep 8. Served routing from the balanced counts gave 40.7 and 99.2 us; from the counts the
    collector ran, 50.5 and 71.9 us: the tensor-parallel block read fewer experts than served routing
    reads, the expert-parallel rank more."""
    i = M_GRID.index(4)
    out = {}
    for split in ((8, 1), (1, 8)):
        shape = (*DSK, *split)
        block = block_row(SGL, "fp8_block", shape, "trtllm")
        routed = routing_of(block_kernels(SGL, "trtllm")[("fp8_block", *shape)], shape)
        out[split] = (block[i], served(block, "fp8_block", shape, 8e12, 4.5e15)[i],
                      served(block, "fp8_block", shape, 8e12, 4.5e15, routed)[i])  # fmt: skip
    assert out[(8, 1)] == pytest.approx((41.7e-6, 40.7e-6, 50.5e-6), abs=0.05e-6)
    assert out[(1, 8)] == pytest.approx((82.6e-6, 99.2e-6, 71.9e-6), abs=0.05e-6)


@pytest.mark.parametrize("dtype", ["fp8_block", "nvfp4"])
def test_only_the_grouped_counts_keep_every_row_at_or_above_its_ideal(dtype):
    """SGLang 0.5.14's TRTLLM-gen rows of DeepSeek's block, every split on 8 or fewer GPUs, 1-1,024 tokens
    (the kernel's grid): under balanced counts some blocks run faster than their ideal time at the B200's
    peaks (8 TB/s, 4.5 / 9 PFLOP/s), which no kernel can; under the collector's grouped counts none."""
    peak = {"fp8_block": 4.5e15, "nvfp4": 9e15}[dtype]
    upto = M_GRID.index(1024) + 1
    worst = {"balanced": 9.0, "grouped": 9.0}
    for key in block_kernels(SGL, "trtllm"):
        if key[0] != dtype or key[1:5] != DSK or key[5] * key[6] > 8:
            continue
        shape = key[1:]
        block = block_row(SGL, dtype, shape, "trtllm")
        if block is None:
            continue
        hits, assigns = collected(shape)
        for name, args in (("balanced", ()), ("grouped", (hits, assigns))):
            ratio = block[:upto] / ideal(dtype, shape, 8e12, peak, *args)[:upto]
            worst[name] = min(worst[name], float(ratio.min()))
    assert worst["balanced"] < 0.9
    assert worst["grouped"] > 1.1
