"""Experts split both ways (hardware.moe_ep with moe_mapping=ep; components/models/experts.py):
the per-GPU expert GEMM shape and the weights a step reads worked by hand, the limits that are
the existing mappings, the checks, and the validation mapping of AIConfigurator's moe_tp_size x
moe_ep_size columns."""

from __future__ import annotations

import math

import pytest
from conftest import compose_cfg
from decodelab.components.models import layers
from decodelab.components.models.experts import busiest_chip_experts, ep_groups
from decodelab.core.checks import check_config
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES
from decodelab.runs.validation import parallel_overrides


def _ffn(m, tp, **kw):
    ops = {o.name: o for o in layers.build_ops(m, tp, 1.0, 2.0, 2.0, 1, **kw)}
    return ops["gate_up_proj"], ops["down_proj"]


def test_split_expert_gemm_shape_and_bytes_by_hand(compose):
    """DeepSeek-R1, FP8 (1 B/weight), 16 GPUs as moe_tp 4 x moe_ep 4: the 256 routed experts in
    4 groups of 64, each expert's 2048 FFN columns over the group's 4 GPUs, so one GPU runs 64
    experts of hidden 7168 x 512 columns: gate/up 7168 x (2 x 512), down 512 x 7168, 3 x 7168 x 512
    = 11,010,048 B per expert (4 x the 2,752,512 B of a 1/16 slice). At one token the 8 routed
    experts fall on the 4 groups as Binomial(64, 1/32) each (independent): the busiest group hits
    E[max] = sum_j (1 - F(j - 1)^4) = 3.47918 experts, i.e. 4 x 3.47918 = 13.9167 slices of 1/16
    per GPU (tp: 8; ep over 16: 16 x 1.9751 = 31.6)."""
    m = compose("model=deepseek_r1").model
    pmf = [math.comb(64, j) * (1 / 32) ** j * (31 / 32) ** (64 - j) for j in range(65)]
    e_max = sum(1 - sum(pmf[:j]) ** 4 for j in range(1, 65))
    assert e_max == pytest.approx(3.47918, abs=1e-5)
    assert busiest_chip_experts(256, 8, 1, 4) == pytest.approx(e_max, rel=1e-12)
    head, down = _ffn(m, 16, moe_mapping="ep", moe_ep=4)
    assert head.moe_block[1:7] == (7168, 2048, 8, 256, 4, 4)  # table key: hidden, FFN, k, E, moe_tp, moe_ep
    per16, dense = 3 * 7168 * 128, 3 * 7168 * 1152
    assert 4 * per16 == 3 * 7168 * 512 == 11_010_048
    read = (head.weight_bytes + down.weight_bytes) * 61
    assert read == pytest.approx(58 * (4 * e_max + 1) * per16 + 3 * dense, rel=1e-12)
    held = (head.resident_bytes + down.resident_bytes) * 61  # every GPU holds 64 x 1/4 + 1/16 shared
    assert held == pytest.approx(58 * 257 * per16 + 3 * dense, rel=1e-12)


def test_limits_are_the_existing_mappings(compose):
    """moe_ep = tp is `ep` (whole experts a GPU), moe_ep = 1 is `tp` (every expert over all GPUs)."""
    m = compose("model=deepseek_r1").model
    for got, want in ((dict(moe_mapping="ep", moe_ep=16), dict(moe_mapping="ep")),
                      (dict(moe_mapping="ep", moe_ep=1), dict(moe_mapping="tp"))):  # fmt: skip
        a, b = _ffn(m, 16, **got), _ffn(m, 16, **want)
        assert [o.weight_bytes for o in a] == pytest.approx([o.weight_bytes for o in b], rel=1e-12)
        assert a[0].moe_block[5:7] == b[0].moe_block[5:7]
    assert ep_groups(16, "tp", 4) == 1 and ep_groups(16, "ep", 0) == 16 and ep_groups(1, "ep", 0) == 1


def test_collectives_do_not_change(compose):
    """The split moves weights, not tokens: the all-reduces of tensor-parallel attention (and
    the all-gather / reduce-scatter of data-parallel attention, TensorRT-LLM's CUTLASS MoE) keep
    their bytes (fused_moe_cutlass.py: allgather, fused_moe(tp_size, ep_size), reducescatter)."""
    m = compose("model=qwen3_235b_a22b").model
    for dp in (1, 4):
        a = layers.build_ops(m, 4, 1.0, 2.0, 2.0, 8, moe_mapping="ep", moe_ep=2, attention_dp=dp)
        b = layers.build_ops(m, 4, 1.0, 2.0, 2.0, 8, attention_dp=dp)
        coll = lambda ops: [
            (o.name, o.link_bytes_per_token, o.coll_kind) for o in ops if o.kind == "collective"
        ]  # noqa: E731
        assert coll(a) == coll(b)


@pytest.mark.parametrize(
    "over, msg",
    [
        (("hardware.moe_mapping=ep", "hardware.moe_ep=3"), "hardware.moe_ep=3 must be 0"),
        (("hardware.moe_ep=2",), "places experts under moe_mapping=ep or a2a"),
        (("hardware.moe_mapping=a2a", "hardware.attention_dp=4", "hardware.moe_ep=2"),
         "an all-to-all of experts split over tensor_parallel / moe_ep = 2 chips is not modelled"),
    ],
)  # fmt: skip
def test_bad_expert_split_is_one_error(over, msg):
    cfg = compose_cfg("model=qwen3_235b_a22b", "hardware=h100_sxm", "hardware.n_chips=4", *over)
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        check_config(cfg)


def test_validation_maps_moe_tp_by_moe_ep():
    row = {"tp": 4, "moe_tp": 2, "moe_ep": 2}
    assert parallel_overrides(row, 4) == (["hardware.moe_mapping=ep", "hardware.moe_ep=2"], 4, 1)
    assert parallel_overrides({"tp": 1, "dp": 8, "moe_tp": 1, "moe_ep": 8}, 1)[0] == [
        "hardware.attention_dp=8",
        "hardware.moe_mapping=ep",
    ]
    with pytest.raises(ValueError, match="moe_tp=2 x ep=2 must be tp x dp = 8 GPUs"):
        parallel_overrides({"tp": 8, "moe_tp": 2, "moe_ep": 2}, 8)


def _row(src, tp, adp, mtp, mep, batch=4, backend="trtllm", model="deepseek-ai/DeepSeek-R1"):
    import pandas as pd

    return pd.Series(
        dict(silicon_data_source=src, backend=backend, model_path=model, batch_size=str(batch),
             tp_size=str(tp), pp_size="1", attention_dp_size=str(adp), moe_tp_size=str(mtp),
             moe_ep_size=str(mep))
    )  # fmt: skip


IMAX = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=32; wip=False"


@pytest.mark.parametrize(
    "cols, split",
    [
        ((64, 1, 8, 8), (8, 1, 1, 8)),  # tp8 ep8, attention TP (TensorRT-LLM, SGLang)
        ((1, 64, 8, 8), (1, 8, 1, 8)),  # tp8 ep8 dp-attn: attention DP over the 8 GPUs
        ((1, 4, 2, 2), (1, 2, 1, 2)),  # gpt-oss tp2 ep2 dp-attn
        ((4, 4, 1, 16), (4, 1, 1, 4)),  # vLLM tp4 ep4: --tensor-parallel-size 4 --enable-expert-parallel
        ((8, 1, 8, 1), None),  # tp8 ep1: recorded as launched
        ((16, 1, 8, 2), None),  # not the EP = TP signature: kept as written
    ],
)
def test_twice_counted_ep_runs_as_launched(cols, split):
    """InferenceX single-node rows of the 2026-04-06 / db-dump dumps record tp_size x
    attention_dp_size = TP x EP (aic_mapping.yaml ep_counted_twice): read as the T GPUs launched."""
    from decodelab.runs import aic_parallel, aic_rows

    row = _row(IMAX, *cols, batch=32)
    assert aic_parallel.launched(row) == split
    assert aic_parallel.launched(_row("source_file=/x.csv; silicon_concurrency=32", *cols)) is None
    par, why = aic_rows.parallel_of(row, "deepseek_r1", "b200_sxm")
    if split:
        assert why == "" and (par["tp"], par["dp"], par["moe_tp"], par["moe_ep"]) == split
        assert aic_rows.concurrency_of(row) == (32, "")  # the clients: silicon_concurrency


def test_multi_node_reason_without_the_dump_marker():
    from decodelab.runs import aic_rows

    _, why = aic_rows.parallel_of(_row("s", 64, 1, 8, 8), "deepseek_r1", "b200_sxm")
    assert why.startswith("multi-node: tp_size 64 x attention_dp_size 1 x pp_size 1 = 64 GPUs")


def test_network_between_nvlink_domains_by_hand():
    """16 H100s in two HGX boards (hardware nvlink_domain 8, 8 x 400 Gb/s ConnectX-7 = 50 GB/s
    per GPU): a ring collective's boundary traffic shares the 8 NICs of a board, min(450, 8 x 50) =
    400 GB/s per GPU, and a small collective runs within each board, between the boards and within
    each board again, 2 x 12 + 20 = 44 us (nccl-tests: 46-48 us on 2 x 8 H20); an all-to-all sends 7/15 of a GPU's
    bytes over NVLink (450 GB/s) and 8/15 through its own NIC (50 GB/s) at once: the NIC's
    8/15 / 50 takes longer, so its bytes count 8/15 / 50 x 400 = 4.2667 times at 400 GB/s."""
    from decodelab.components.ops import Op
    from decodelab.core import parallel

    hw = compose_cfg("hardware=h100_sxm", "hardware.n_chips=16").hardware
    assert parallel.collective_link(hw) == (400.0, 44.0)
    a2a = Op("x", "collective", link_bytes_per_token=1000.0, coll_kind="all_to_all")
    ring = Op("y", "collective", link_bytes_per_token=1000.0, coll_kind="all_reduce")
    assert parallel.link_bytes(a2a, hw) == pytest.approx(1000.0 * 8 / 15 / 50 * 400, rel=1e-12)
    assert parallel.link_bytes(ring, hw) == 1000.0
    one = compose_cfg("hardware=h100_sxm", "hardware.n_chips=8").hardware  # one domain: NVLink
    assert parallel.collective_link(one) == (450.0, 12.0) and parallel.link_bytes(a2a, one) == 1000.0


WIDE = ("model=deepseek_v3", "hardware=h200_sxm", "hardware.n_chips=16", "hardware.mla_mapping=data",
        "hardware.moe_mapping=a2a", "workload.weight_dtype=fp8", "workload.batch_size=64",
        "workload.prompt_len=1024", "workload.output_len=8")  # fmt: skip


def test_wide_ep_over_two_nodes_kernel_equals_reference():
    """DeepSeek-V3 with data-parallel attention and all-to-all expert parallelism over 16 H200s in
    two nodes: the kernel and the pure-Python reference agree, and the same design inside one
    16-GPU NVLink domain (a what-if) is faster by the network's share of the step."""
    import numpy as np
    from decodelab.core import kernel as K
    from decodelab.core.build import build
    from decodelab.core.reference import reference_simulate
    from decodelab.modes.dispatch import evaluate

    cfg = compose_cfg(*WIDE)
    d = build(cfg)
    steps = np.vstack([K.request_steps(64, 1000, 3), [[16, 500, 5, 1, 0]]])
    out = K.simulate(*d.arrays(), steps)
    for r, row in enumerate(reference_simulate(d, cfg, steps)):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)
    two = evaluate(cfg)
    one = evaluate(compose_cfg(*WIDE, "hardware.nvlink_domain=16"))
    assert two.status == one.status == "ok"
    assert two.metrics["tpot_ms"] > one.metrics["tpot_ms"]


def test_no_network_given_is_one_error():
    cfg = compose_cfg("model=qwen3_235b_a22b", "hardware=h100_sxm", "hardware.n_chips=16",
                      "hardware.scale_out_bw_gb_s=0")  # fmt: skip
    with pytest.raises(ConfigError, match="spans more than one NVLink domain of 8 chips"):
        check_config(cfg)
