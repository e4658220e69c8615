"""Data-parallel attention (`hardware.attention_dp`; components/models/attn_dp.py, docs/model.md,
"Parallelism beyond tensor parallelism"): bytes per chip worked by hand, the MLA case equal to
`mla_mapping=data`, the default unchanged, the kernel against the reference, bad and infeasible
combinations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_serve_matches_reference, compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.checks import check_config
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving.layout import Eng


def _ops(*o):
    d = build(compose_cfg("model=llama3_1_8b", "hardware=dgx_h100", "workload.batch_size=8", *o))
    return {op.name: op for op in d.ops}


def test_bytes_by_hand():
    # Llama-3.1-8B (d 4096, 32 heads, 8 KV heads of 128, BF16) on 8 chips in 2 attention groups
    # of 4: each chip attends 32/4 = 8 heads and 8/4 = 2 KV heads for its group's ceil(8/2) = 4
    # of the 8 sequences (share 1/2).
    ops = _ops("hardware.attention_dp=2")
    # KV read per context token and layer, over the step's 8 sequences: 4 x 2 x 2 x 128 x 2 B = 4096 B
    assert 8 * ops["attention"].kv_read_per_ctx == pytest.approx(4 * 2 * 2 * 128 * 2)
    # QKV weights per chip: (8 + 2 x 2) x 128 x 4096 x 2 B, the whole attention block / 4 (not / 8)
    assert ops["qkv_proj"].weight_bytes == (8 + 4) * 128 * 4096 * 2
    # before the FFN: the group's all-reduce 1/2 x 2 x 3/4 x 8192 = 6144 B plus the all-gather of
    # the other group's tokens 1/2 x 8192 = 4096 B, per step token; two collectives
    a = ops["attn_allreduce"]
    assert a.link_bytes_per_token == pytest.approx(6144 + 4096) and a.n_collectives == 2
    # after: reduce-scatter over 8 chips 7/8 x 8192 = 7168 B, the group's all-gather 1/2 x 3/4 x 8192 = 3072 B
    b = ops["mlp_allreduce"]
    assert b.link_bytes_per_token == pytest.approx(7168 + 3072) and b.n_collectives == 2
    # dp = tp: groups of one chip, no group collectives: the all-gather and reduce-scatter of
    # 7/8 x 8192 = 7168 B each, as MLA's mla_mapping=data (tests/test_mla_mapping.py)
    ops = _ops("hardware.attention_dp=8")
    assert ops["attn_allreduce"].link_bytes_per_token == pytest.approx(7168)
    assert ops["mlp_allreduce"].link_bytes_per_token == pytest.approx(7168)
    assert ops["attn_allreduce"].n_collectives == 1


def test_kv_per_chip_not_divided_by_tp():
    # KV per chip: tp = 8 splits the 8 KV heads (1 a chip) over all 64 sequences; dp = 8 holds all
    # 8 KV heads of 8 sequences: the same bytes; dp = 2: 2 KV heads of 32 sequences, the same again
    # (no KV head is replicated at tp = 8): the gain is for models with fewer KV heads than chips.
    base = build(compose_cfg("model=llama3_1_8b", "hardware=dgx_h100", "workload.batch_size=64"))
    for dp in (2, 8):
        d = build(
            compose_cfg(
                "model=llama3_1_8b",
                "hardware=dgx_h100",
                "workload.batch_size=64",
                f"hardware.attention_dp={dp}",
            )
        )
        assert d.kv_slot_bytes_chip * 64 == pytest.approx(base.kv_slot_bytes_chip * 64)
    # Qwen3-235B-A22B: 4 KV heads on 8 chips are replicated twice under tp; dp = 2 (groups of
    # 4) stores each once: half the KV per chip
    q = ("model=qwen3_235b_a22b", "hardware=dgx_h100", "workload.batch_size=64", "workload.weight_dtype=fp8")
    tp8, dp2 = build(compose_cfg(*q)), build(compose_cfg(*q, "hardware.attention_dp=2"))
    assert dp2.kv_slot_bytes_chip == pytest.approx(tp8.kv_slot_bytes_chip / 2)


def test_mla_attention_dp_is_mla_mapping_data():
    o = ("model=deepseek_v3", "hardware=dgx_h100", "hardware.n_chips=16", "hardware.tensor_parallel=16",
         "workload.weight_dtype=fp8", "workload.batch_size=64")  # fmt: skip
    assert (
        evaluate(compose_cfg(*o, "hardware.attention_dp=16")).metrics
        == evaluate(compose_cfg(*o, "hardware.mla_mapping=data")).metrics
    )


def test_default_unchanged():
    o = ("model=qwen3_30b_a3b", "hardware=dgx_h100", "workload.batch_size=16")
    assert evaluate(compose_cfg(*o)).metrics == evaluate(compose_cfg(*o, "hardware.attention_dp=1")).metrics


@pytest.mark.parametrize(
    "o",
    [
        ("model=llama3_1_70b", "hardware.attention_dp=2"),
        ("model=qwen3_235b_a22b", "hardware.attention_dp=8", "hardware.moe_mapping=a2a"),
        ("model=qwen3_30b_a3b", "hardware.attention_dp=4", "hardware.pipeline_parallel=2",
         "hardware.tensor_parallel=4"),
    ],
)  # fmt: skip
def test_kernel_matches_reference(o):
    cfg = compose_cfg("hardware=dgx_h100", "workload.batch_size=12", "workload.weight_dtype=fp8", *o)
    d = build(cfg)
    steps = np.vstack([K.request_steps(12, 700, 3), [[16, 500, 5, 1, 0]]])
    out = K.simulate(*d.arrays(), steps)
    for r, row in enumerate(reference_simulate(d, cfg, steps)):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)


@pytest.mark.parametrize(
    "o,start",
    [
        (("model=llama3_1_8b", "hardware.attention_dp=3"), "hardware.attention_dp=3 must be >= 1 and divide"),
        (("model=llama3_1_8b", "hardware.attention_dp=0"), "hardware.attention_dp=0 must be >= 1"),
        (("model=deepseek_v3", "hardware.attention_dp=2"), "hardware.attention_dp=2 for an MLA model"),
        (("model=qwen3_30b_a3b", "hardware.attention_dp=2", "hardware.moe_mapping=a2a"),
         "hardware.moe_mapping=a2a needs data-parallel attention"),
    ],
)  # fmt: skip
def test_bad_values_one_line(o, start):
    with pytest.raises(ConfigError) as e:
        check_config(compose_cfg("hardware=dgx_h100", *o))
    assert "\n" not in str(e.value) and str(e.value).startswith(start)


def test_infeasible_groups_recorded():
    # 4 KV heads, 12 chips (3 per KV head under tp), groups of 12 / 2 = 6 chips: neither divides
    r = evaluate(
        compose_cfg(
            "model=llama3_1_8b", "hardware=dgx_h100", "hardware.n_chips=12", "hardware.tensor_parallel=12",
            "model.n_heads=48", "model.n_kv_heads=4", "model.ffn_dim=12288", "hardware.attention_dp=2",
        )
    )  # fmt: skip
    assert r.status == "infeasible" and "tensor_parallel / attention_dp = 6 chips" in r.reason


SERVE = ("workload.n_requests=12", "workload.prompt_len=300", "workload.output_len=12")


def test_serving_groups_by_hand():
    """One of the groups is simulated: ceil(c / groups) clients; the FFN sees c / ceil(c / groups)
    times its tokens (fewer clients than groups leave groups idle); an open loop deals its requests
    round-robin (x groups); MLA's data mapping has one group per chip; a static run has none."""
    from decodelab.core import parallel

    def scale(*o):
        return parallel.dp_token_scale(compose_cfg("hardware=dgx_h100", *o))

    gqa = ("model=llama3_1_8b", "hardware.attention_dp=4", "workload=closed_loop")
    assert scale(*gqa, "workload.concurrency=16") == 4.0  # 4 clients a group
    assert scale(*gqa, "workload.concurrency=6") == 3.0  # 2 clients in the busiest group
    assert scale(*gqa, "workload.concurrency=2") == 2.0  # two groups idle
    assert scale("model=llama3_1_8b", "hardware.attention_dp=4", "workload=open_loop") == 4.0
    assert scale("model=llama3_1_8b", "hardware.attention_dp=4") == 1.0  # static
    mla = (
        "model=deepseek_v3",
        "hardware.mla_mapping=data",
        "workload=closed_loop",
        "workload.concurrency=16",
    )
    assert scale(*mla) == 8.0 and parallel.serving_groups(compose_cfg("hardware=dgx_h100", *mla)) == 8


def test_serving_ops_by_hand():
    """Serving, Llama-3.1-8B on 8 chips in 2 groups of 4: the attention block is one group's (2 KV
    heads of 128 per chip, no share), the FFN and the collectives run on every group's tokens
    (Op.replica), with the collective bytes of an even split per replica token: before the FFN
    1/2 x 2 x 3/4 x 8192 + 1/2 x 8192 = 10240 B, after 7/8 x 8192 + 1/2 x 3/4 x 8192 = 10240 B."""
    d = build(compose_cfg("model=llama3_1_8b", "hardware=dgx_h100", "hardware.attention_dp=2",
                          "workload=closed_loop"))  # fmt: skip
    ops = {op.name: op for op in d.ops}
    assert ops["attention"].kv_read_per_ctx == 2 * 2 * 128 * 2 and not ops["attention"].replica
    assert ops["attn_allreduce"].link_bytes_per_token == pytest.approx(6144 + 4096)
    assert ops["mlp_allreduce"].link_bytes_per_token == pytest.approx(7168 + 3072)
    replica = {name for name, op in ops.items() if op.replica}
    assert replica == {"attn_allreduce", "gate_up_proj", "activation", "down_proj", "mlp_allreduce"}


@pytest.mark.parametrize(
    "o",
    [
        ("model=llama3_1_70b", "hardware=dgx_h100", "hardware.attention_dp=2", "workload.concurrency=5"),
        ("model=qwen3_30b_a3b", "hardware=dgx_h100", "hardware.n_chips=4", "hardware.tensor_parallel=4",
         "hardware.attention_dp=4", "workload.concurrency=8"),
        ("model=deepseek_v3", "hardware=h200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8",
         "hardware.attention_dp=8", "hardware.moe_mapping=a2a", "workload.concurrency=16"),
    ],
)  # fmt: skip
def test_serving_kernel_matches_reference(o):
    """Serving under data-parallel attention: the Numba scheduler equals its pure-Python reference
    (the FFN's tokens scaled in both), and the replica's throughput is the groups' (Little's law:
    concurrency = requests per second x end-to-end latency, within the run's ramp)."""
    cfg = compose_cfg(
        "workload=closed_loop", "workload.weight_dtype=fp8", "workload.kv_dtype=fp8", *SERVE, *o
    )
    assert_serve_matches_reference(cfg)
    m = evaluate(cfg).metrics
    assert m["requests_per_s"] * m["e2e_ms"] * 1e-3 == pytest.approx(cfg.workload.concurrency, rel=0.35)


def test_sglang_group_settings_by_hand():
    """SGLang under DP attention (server_args.py in both wheels): each group's chunked prefill and
    step budget are 8192 // 2 = 4096 tokens, its new_token_ratio 0.7 x 0.3 = 0.21 (min 0.098 x 0.3),
    and 0.5.1 reserves 4 GiB more per GPU; TensorRT-LLM keeps its file's values per group."""
    from decodelab.components.placement import GIB
    from decodelab.core.kv_pool import kv_pool_bytes
    from decodelab.core.schema import memory_tiers
    from decodelab.modes.serving import simulate as S

    o = ("model=qwen3_30b_a3b", "hardware=dgx_h100", "hardware.n_chips=4", "hardware.tensor_parallel=4",
         "workload=closed_loop", "workload.concurrency=8", *SERVE)  # fmt: skip
    for engine, budget, ratio in (("sglang", 4096, 0.21), ("default", 8192, 0.0)):
        cfg = compose_cfg(*o, f"engine={engine}", "hardware.attention_dp=2")
        p = S.prepare(cfg, build(cfg))
        assert p["eng"][Eng.MAX_TOKENS] == budget and p["eng"][Eng.ADMIT_RATIO] == pytest.approx(ratio)
        if engine == "sglang":
            assert p["eng"][Eng.CHUNK] == 4096 and p["eng"][Eng.ADMIT_MIN] == pytest.approx(0.098 * 0.3)
    plain = compose_cfg(*o, "engine=sglang")
    dp = compose_cfg(*o, "engine=sglang", "hardware.attention_dp=2")
    tiers = memory_tiers(plain.hardware)
    w = 10 * GIB
    assert kv_pool_bytes(plain, tiers, w) - kv_pool_bytes(dp, tiers, w) == pytest.approx(4 * GIB)
