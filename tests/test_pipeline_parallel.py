"""Pipeline parallelism (hardware.pipeline_parallel, workload.pp_microbatches; framework/core/
pipeline.py, docs/model.md, "Parallelism beyond tensor parallelism"): hand-worked bubbles and
transfers, the layer split, memory per stage, the kernel against the reference, pp = 1 unchanged,
infeasible and bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_serve_matches_reference, compose_cfg
from decodelab.core import kernel as K
from decodelab.core import parallel
from decodelab.core.build import build
from decodelab.core.checks import check_config
from decodelab.core.grid import per_design_reason
from decodelab.core.pipeline import compose, layer_split, microbatches
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError, Infeasible
from decodelab.kernel_layout import CAUSES, Cause
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving.layout import StepLog
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

LAYER, PRE, POST = 0.0, 1.0, 2.0


def _compose(t_call, stage, L, pp, m, p2p, one_shot, out=None):
    """compose() on a row whose causes are the calls' times as memory time (host 0)."""
    row = np.zeros(len(CAUSES))
    row[Cause.MEMORY] = sum(t_call)
    if out is not None:
        row[:] = out
    n_first, n_mid, n_last = layer_split(L, pp)
    compose(
        row, np.array(t_call), np.array(stage), float(L), float(n_first), float(n_mid), float(n_last),
        float(pp), float(m), p2p, one_shot, Cause.HOST, Cause.COLLECTIVES, Cause.FILL_DRAIN,
    )  # fmt: skip
    return row


def test_layer_split_is_vllms():
    # vLLM get_pp_indices: L // pp each, the remainder one each to stages pp-2, pp-3, ...
    assert layer_split(32, 4) == (8, 8, 8)  # [8, 8, 8, 8]
    assert layer_split(80, 3) == (27, 27, 26)  # 80 = 26 x 3 + 2: partitions[-2], [-3] += 1
    assert layer_split(61, 4) == (15, 16, 15)  # 61 = 15 x 4 + 1: [15, 15, 16, 15]
    assert layer_split(7, 2) == (4, 0, 3)  # [4, 3]
    assert layer_split(4, 4) == (1, 1, 1)


def test_gpipe_bubble_by_hand():
    # pp = 4 balanced stages, L = 8 layers at 1 ms each (one layer call, 8 ms), no embedding or
    # head time, no transfer; m = 4 micro-batches prefilled from an empty pipeline (GPipe):
    # t_stage = 2 ms, step = (m + pp - 1) t_stage = 7 x 2 = 14 ms; each stage works m x 2 = 8 ms
    # of it, so the bubble is 6 ms = (pp - 1) / (m + pp - 1) = 3/7 of the step.
    row = _compose([8e-3], [LAYER], 8, 4, 4, 0.0, True)
    assert row.sum() == pytest.approx(14e-3, rel=1e-12)
    assert row[Cause.MEMORY] == pytest.approx(8e-3, rel=1e-12)  # m T / pp = 4 x 8 / 4
    assert row[Cause.FILL_DRAIN] / row.sum() == pytest.approx(3 / 7, rel=1e-12)
    # m = 1: (pp - 1) / pp = 3/4 idle; m = 12: 3/15
    assert _compose([8e-3], [LAYER], 8, 4, 1, 0.0, True)[Cause.FILL_DRAIN] / 8e-3 == pytest.approx(3 / 4)
    row = _compose([8e-3], [LAYER], 8, 4, 12, 0.0, True)
    assert row[Cause.FILL_DRAIN] / row.sum() == pytest.approx(3 / 15, rel=1e-12)


def test_decode_steady_state_by_hand():
    # L = 4 layers, pp = 2 (2 + 2 layers): layer calls 8 ms (2 ms a layer), LM head etc. 1 ms on
    # the last stage, transfer 0.5 ms, m = 2 micro-batches.
    # stages: first 2 x 2 = 4 ms, last 2 x 2 + 1 = 5 ms -> t_max = 5; whole T = 9 ms; crossing
    # T + (pp-1) x 0.5 = 9.5 ms.
    # decode (steady): step = max(m t_max, 9.5) = max(10, 9.5) = 10 ms; stages work m T / pp = 9 ms
    # on average -> 1 ms idle (stage imbalance: fill_drain), the transfer is hidden (0).
    row = _compose([8e-3, 1e-3], [LAYER, POST], 4, 2, 2, 0.5e-3, False)
    assert row.sum() == pytest.approx(10e-3, rel=1e-12)
    assert row[Cause.MEMORY] == pytest.approx(9e-3, rel=1e-12)
    assert row[Cause.FILL_DRAIN] == pytest.approx(1e-3, rel=1e-12)
    assert row[Cause.COLLECTIVES] == pytest.approx(0.0, abs=1e-15)
    # m = 1: step = max(5, 9.5) = 9.5 ms: the transfer (0.5) is exposed, the other stage idles
    # 9 - 9/2 = 4.5 ms
    row = _compose([8e-3, 1e-3], [LAYER, POST], 4, 2, 1, 0.5e-3, False)
    assert row.sum() == pytest.approx(9.5e-3, rel=1e-12)
    assert row[Cause.COLLECTIVES] == pytest.approx(0.5e-3, rel=1e-12)
    assert row[Cause.FILL_DRAIN] == pytest.approx(4.5e-3, rel=1e-12)
    # prefill (one-shot), m = 2: (m - 1) t_max + T + transfer = 5 + 9 + 0.5 = 14.5 ms
    row = _compose([8e-3, 1e-3], [LAYER, POST], 4, 2, 2, 0.5e-3, True)
    assert row.sum() == pytest.approx(14.5e-3, rel=1e-12)
    assert row[Cause.COLLECTIVES] == pytest.approx(0.5e-3, rel=1e-12)
    # host time is paid once per step, not scaled
    out = np.zeros(len(CAUSES))
    out[Cause.MEMORY], out[Cause.HOST] = 9e-3, 0.1e-3
    row = _compose([8e-3, 1e-3], [LAYER, POST], 4, 2, 2, 0.5e-3, False, out)
    assert row[Cause.HOST] == 0.1e-3 and row.sum() == pytest.approx(10.1e-3, rel=1e-12)


def test_microbatches():
    assert microbatches(8, 4) == (2 / 8, 4)
    assert microbatches(5, 2) == (3 / 5, 2)  # the largest micro-batch: ceil(5/2) = 3
    assert microbatches(1, 4) == (1.0, 1)  # one sequence: one micro-batch, the rest empty
    assert microbatches(6, 4) == (2 / 6, 3)  # ceil(6/4) = 2 -> 3 micro-batches of 2


def _cfg(*o):
    return compose_cfg("model=llama3_1_8b", "hardware=dgx_h100", "workload.batch_size=8", *o)


def _tpot(cfg):
    r = evaluate(cfg)
    assert r.status == "ok", r.reason
    return r.metrics


def test_pp1_fields_change_nothing():
    base = _tpot(_cfg("hardware.tensor_parallel=2"))
    same = _tpot(
        _cfg(
            "hardware.tensor_parallel=2",
            "hardware.pipeline_parallel=1",
            "workload.pp_microbatches=3",
            "hardware.pp_link_bw_gb_s=50",
            "hardware.p2p_latency_us=7",
        )
    )
    assert same == base  # every metric, bit for bit
    assert "pp_bubble_pct" not in base


def test_transfer_by_hand_one_microbatch():
    # One micro-batch: the pipeline is a serial chain of the pp stages, the same work as one TP
    # group plus (pp - 1) transfers of the batch's hidden states and residuals. Llama-3.1-8B,
    # batch 8, bf16, tp 1: 8 x 2 x 4096 x 2 = 131,072 B per transfer over 450 GB/s = 0.29127 us,
    # + 5 us latency (set); pp = 4: 3 x 5.29127 = 15.8738 us more per decode step than pp = 1.
    one = _tpot(_cfg("hardware.tensor_parallel=1"))
    four = _tpot(
        _cfg(
            "hardware.tensor_parallel=1",
            "hardware.pipeline_parallel=4",
            "workload.pp_microbatches=1",
            "hardware.p2p_latency_us=5",
        )
    )
    hop = 5e-6 + 8 * 2 * 4096 * 2 / 450e9
    assert (four["tpot_ms"] - one["tpot_ms"]) * 1e-3 == pytest.approx(3 * hop, rel=1e-6)
    # the other three stages idle while one works: 3/4 of the busy time is bubble
    busy = one["tpot_ms"] - one["tpot_host_ms"]
    assert four["tpot_fill_drain_ms"] == pytest.approx(0.75 * busy, rel=1e-9)
    assert four["pp_bubble_pct"] == pytest.approx(100 * 0.75 * busy / four["tpot_ms"], rel=1e-9)


def test_memory_per_stage_by_hand():
    # tp = 1, pp = 2, Llama-3.1-8B (32 layers, untied): stage 0 holds 16 layers + the embedding
    # table (V d), stage 1 16 layers + final norm (d) + LM head (V d): stage 1 is the heavier by
    # the final norm, so the chip placed holds (all weights + d x 2 B) / 2; KV per chip halves.
    d1 = build(_cfg("hardware.tensor_parallel=1"))
    d2 = build(_cfg("hardware.tensor_parallel=1", "hardware.pipeline_parallel=2"))
    assert d2.weights_chip == pytest.approx((d1.weights_chip + 4096 * 2) / 2, rel=1e-12)
    assert d2.kv_slot_bytes_chip == pytest.approx(d1.kv_slot_bytes_chip / 2, rel=1e-12)
    assert d2.max_batch > 2 * d1.max_batch  # more HBM left and half the KV per sequence
    assert d2.hbm_bw_total == 2 * d1.hbm_bw_total  # the replica's chips (Eq. 3 roofline)


def test_transfer_with_tp_by_hand():
    # tp = 2: each rank sends half of the 131,072 B over the stage link (here 50 GB/s, InfiniBand)
    # and the receiving pair all-gathers the other half over NVLink (450 GB/s) after one collective
    # latency (12 us): 5 + 65,536 / 50e9 s + 12 us + 65,536 / 450e9 s = 18.4564 us a boundary.
    one = _tpot(_cfg("hardware.tensor_parallel=2"))
    two = _tpot(
        _cfg(
            "hardware.tensor_parallel=2",
            "hardware.pipeline_parallel=2",
            "workload.pp_microbatches=1",
            "hardware.p2p_latency_us=5",
            "hardware.pp_link_bw_gb_s=50",
        )
    )
    hop = 5e-6 + 65536 / 50e9 + 12e-6 + 65536 / 450e9
    assert (two["tpot_ms"] - one["tpot_ms"]) * 1e-3 == pytest.approx(hop, rel=1e-6)


def test_replicas_count_stages():
    m = _tpot(_cfg("hardware.tensor_parallel=2", "hardware.pipeline_parallel=2"))
    assert m["tok_s_system"] == pytest.approx(2 * m["tok_s_aggregate"], rel=1e-12)  # 8 / (2 x 2)
    assert m["pp_microbatches"] == 2.0
    # batch 3 in 4 micro-batches: ceil(3/4) = 1 sequence each, 3 of them non-empty
    m = _tpot(_cfg("hardware.tensor_parallel=2", "hardware.pipeline_parallel=4", "workload.batch_size=3"))
    assert m["pp_microbatches"] == 3.0


@pytest.mark.parametrize(
    "model,tp,pp,mb,batch",
    [
        ("llama3_1_70b", 4, 2, 0, 8),
        ("llama3_1_70b", 2, 4, 3, 7),
        ("qwen3_30b_a3b", 1, 3, 5, 9),
        ("deepseek_v3", 8, 2, 0, 4),  # MLA + MoE, 61 layers: [31, 30]
        ("llama3_1_8b", 1, 8, 1, 1),
    ],
)
def test_kernel_matches_reference(model, tp, pp, mb, batch):
    cfg = compose_cfg(
        f"model={model}",
        "hardware=dgx_h100",
        "hardware.n_chips=16",
        f"hardware.tensor_parallel={tp}",
        f"hardware.pipeline_parallel={pp}",
        f"workload.pp_microbatches={mb}",
        f"workload.batch_size={batch}",
        "workload.weight_dtype=fp8",
    )
    d = build(cfg)
    steps = np.vstack(
        [K.request_steps(batch, 1000, 4), [[16, 500, 5, 1, 0]], [[3, 40, 2, 3, 1]], [[1, 9000, 64, 1, 0]]]
    )
    out = K.simulate(*d.arrays(), steps)
    ref = reference_simulate(d, cfg, steps)
    for r, row in enumerate(ref):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)


def test_infeasible_recorded_with_reason():
    r = evaluate(_cfg("hardware.tensor_parallel=4", "hardware.pipeline_parallel=4"))
    assert r.status == "infeasible"
    assert "tensor_parallel=4 x pipeline_parallel=4 = 16 chips exceeds n_chips=8" in r.reason
    r = evaluate(
        compose_cfg(
            "model=smollm2_135m", "hardware=dgx_h100", "hardware.n_chips=64", "hardware.tensor_parallel=1",
            "hardware.pipeline_parallel=64",
        )
    )  # fmt: skip
    assert r.status == "infeasible" and "exceeds n_layers=30" in r.reason


@pytest.mark.parametrize(
    "override,field",
    [
        ("hardware.pipeline_parallel=0", "hardware.pipeline_parallel=0 must be >= 1"),
        ("workload.pp_microbatches=-2", "workload.pp_microbatches=-2 must be >= 0"),
        ("hardware.pp_link_bw_gb_s=-1", "hardware.pp_link_bw_gb_s=-1"),
    ],
)
def test_bad_values_one_line(override, field):
    with pytest.raises(ConfigError) as e:
        check_config(_cfg(override))
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(field)


def test_not_modelled_combinations_are_one_line():
    cfg = compose_cfg("model=llama3_1_8b", "hardware=sn40l_node8", "hardware.pipeline_parallel=2")
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    assert str(e.value).count("\n") == 0 and "hardware.execution=gpu only" in str(e.value)
    cfg = _cfg(
        "hardware.tensor_parallel=2", "hardware.pipeline_parallel=2", "workload=open_loop", "disagg=ib_1p1d"
    )
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    assert str(e.value).count("\n") == 0 and "not modelled with disaggregated pools" in str(e.value)


def test_grid_routes_pipelines_to_per_design_path():
    cfg = _cfg("hardware.tensor_parallel=2", "hardware.pipeline_parallel=2")
    assert per_design_reason(cfg) == "pipeline parallelism"
    assert per_design_reason(_cfg("hardware.tensor_parallel=2")) is None
    assert parallel.replica_chips(cfg.hardware) == 4


@pytest.mark.slow
@settings(
    max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much]
)
@given(st.data())
def test_kernel_matches_reference_random(data):
    """Random pipeline x attention-DP x TP designs and step rows (prefill, decode, mixed)."""
    model = data.draw(st.sampled_from(["llama3_1_8b", "qwen3_30b_a3b", "mixtral_8x7b", "deepseek_v3"]))
    tp = data.draw(st.sampled_from([1, 2, 4, 8]))
    pp = data.draw(st.integers(1, 5))
    dp = data.draw(st.sampled_from([d for d in (1, 2, 4, 8) if tp % d == 0]))
    b = data.draw(st.integers(1, 48))
    cfg = compose_cfg(
        f"model={model}", "hardware=dgx_h100", "hardware.n_chips=64", f"hardware.tensor_parallel={tp}",
        f"hardware.pipeline_parallel={pp}", f"hardware.attention_dp={dp}",
        f"workload.pp_microbatches={data.draw(st.integers(0, 6))}", f"workload.batch_size={b}",
        f"workload.weight_dtype={data.draw(st.sampled_from(['fp8', 'bf16']))}",
        f"hardware.p2p_latency_us={data.draw(st.sampled_from([-1.0, 3.0]))}",
        f"hardware.pp_link_bw_gb_s={data.draw(st.sampled_from([0.0, 50.0]))}",
    )  # fmt: skip
    try:
        d = build(cfg)
    except (ConfigError, Infeasible):
        assume(False)
    rows = []
    for _ in range(data.draw(st.integers(1, 3))):
        q = data.draw(st.integers(1, 256))
        rows.append(
            (
                q,
                q + data.draw(st.integers(0, 8192)),
                data.draw(st.integers(1, 64)),
                1,
                data.draw(st.booleans()),
            )
        )
    steps = np.array(rows, dtype=float)
    out = K.simulate(*d.arrays(), steps)
    for r, row in enumerate(reference_simulate(d, cfg, steps)):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)


SERVE = ("workload.n_requests=12", "workload.prompt_len=300", "workload.output_len=12")


@pytest.mark.parametrize(
    "workload, extra",
    [
        ("open_loop", ("workload.arrival_rate=50",)),
        ("closed_loop", ("workload.concurrency=5", "engine=vllm", "engine.chunk_size=128")),
    ],
)
def test_serving_with_stages_matches_the_reference(workload, extra):
    """Serving over pipeline stages: every step (decode, prefill, mixed) is the kernel's pipeline
    composition of its aggregates (steady state, or GPipe for a prefill-only step); the Numba
    scheduler equals its pure-Python reference, which costs each step per stage."""

    cfg = compose_cfg(
        "model=llama3_1_8b", "hardware=dgx_h100", "hardware.n_chips=4", "hardware.tensor_parallel=2",
        "hardware.pipeline_parallel=2", f"workload={workload}", *SERVE, *extra,
    )  # fmt: skip
    steps = assert_serve_matches_reference(cfg)
    assert np.all(steps[:, StepLog.DUR] > 0)


def test_serving_pool_is_the_tightest_stage_by_hand():
    """Llama-3.1-8B TP1 x PP2 on 2 GPUs: each stage holds 16 of 32 layers, so a cached token takes
    half the KV bytes per chip, and about half the weights: the pool (of the stage that holds the
    fewest tokens, build()) holds more than twice the tokens of one GPU holding every layer. One
    TP1 x PP2 replica takes the whole stream (system = aggregate)."""
    from decodelab.modes.serving.metrics import kv_bytes_per_token_chip

    one = build(compose_cfg("model=llama3_1_8b", "hardware=h100_sxm", "workload=open_loop", *SERVE))
    cfg2 = compose_cfg(
        "model=llama3_1_8b", "hardware=dgx_h100", "hardware.n_chips=2", "hardware.tensor_parallel=1",
        "hardware.pipeline_parallel=2", "workload=open_loop", *SERVE,
    )  # fmt: skip
    two = build(cfg2)
    kv_all = sum(op.kv_write_per_token * op.repeat for op in one.ops)
    assert kv_bytes_per_token_chip(one) == kv_all
    assert kv_bytes_per_token_chip(two) == pytest.approx(kv_all / 2, rel=1e-12)
    assert two.memory["kv_pool_bytes"] < 2 * one.memory["kv_pool_bytes"]
    tokens_one = one.memory["kv_pool_bytes"] / kv_all
    tokens_two = two.memory["kv_pool_bytes"] / (kv_all / 2)
    assert 2.0 < tokens_two / tokens_one < 3.0  # half the weights per chip too: more than twice
    r = evaluate(cfg2)
    assert r.status == "ok", r.reason
    assert r.metrics["tok_s_system"] == pytest.approx(r.metrics["tok_s_aggregate"])  # one replica
