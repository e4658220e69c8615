"""FP4 weight and KV dtypes (bytes and compute rate) and the cost units: tokens/s per chip, energy
per token, cost per million tokens (framework/core/cost.py, docs/model.md "Cost and energy").
Golden values are worked out by hand in the comments."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from decodelab.core import cost
from decodelab.core.build import build
from decodelab.core.cost_setup import peak_flops
from decodelab.core.checks import DTYPE_BYTES
from decodelab.modes.dispatch import evaluate

PARAMS_8B = 8_030_261_248  # Llama-3.1-8B, tests/test_golden.py PARAMS_8B (from the shapes)
KV_ELEMS_8B = 2 * 32 * 8 * 128  # K and V x 32 layers x 8 KV heads x head_dim 128 = 65,536 per token


# ------------------------------------------------------------------------------ FP4 bytes


def test_fp4_bytes_per_element_by_hand():
    # fp4: one E2M1 element = 4 bits = 0.5 B
    assert DTYPE_BYTES["fp4"] == 0.5
    # mxfp4 (OCP MX v1.0): 32 elements x 4 bits + one 8-bit E8M0 scale = 136 bits / 32 = 4.25 bits
    assert DTYPE_BYTES["mxfp4"] == (32 * 4 + 8) / 32 / 8 == 0.53125
    # nvfp4 (NVIDIA): 16 elements x 4 bits + one 8-bit E4M3 scale = 72 bits / 16 = 4.5 bits
    assert DTYPE_BYTES["nvfp4"] == (16 * 4 + 8) / 16 / 8 == 0.5625


# Llama-3.1-8B: 8,030,261,248 parameters, of which the embedding table and the (untied) LM head are
# 128,256 x 4,096 = 525,336,576 each; those two stay BF16 under quantized weights (components/ops.py
# lm_head_dtype): 2 x 525,336,576 x 2 B = 2,101,346,304 B, the other 6,979,588,096 at the dtype's bytes.
EMBED_8B = 128_256 * 4_096
REST_8B = PARAMS_8B - 2 * EMBED_8B


@pytest.mark.parametrize(
    "dtype, weight_bytes, kv_bytes",
    [
        # 6,979,588,096 x 0.5 = 3,489,794,048 + 2,101,346,304 = 5,591,140,352; KV 65,536 x 0.5 = 32,768
        ("fp4", 5_591_140_352, 32_768),
        # 6,979,588,096 / 32 x 17 (= x 0.53125) = 3,707,906,176 + 2,101,346,304 = 5,809,252,480;
        # KV 65,536 x 0.53125 = 34,816
        ("mxfp4", 5_809_252_480, 34_816),
        # 6,979,588,096 / 16 x 9 (= x 0.5625) = 3,926,018,304 + 2,101,346,304 = 6,027,364,608;
        # KV 65,536 x 0.5625 = 36,864
        ("nvfp4", 6_027_364_608, 36_864),
    ],
)
def test_fp4_weight_and_kv_bytes_llama31_8b(compose, dtype, weight_bytes, kv_bytes):
    d = build(compose("workload.weight_dtype=" + dtype, "workload.kv_dtype=" + dtype))
    assert d.weight_bytes_total == weight_bytes
    assert d.kv_bytes_per_token == kv_bytes
    assert REST_8B * DTYPE_BYTES[dtype] + 2 * EMBED_8B * 2 == weight_bytes
    assert KV_ELEMS_8B * DTYPE_BYTES[dtype] == kv_bytes


# ------------------------------------------------------------------------------ FP4 compute rate


@pytest.mark.parametrize(
    "hardware, tflops, rate",
    [
        ("h100_sxm", 1978.9, "FP8"),  # no FP4 units; FP8 Tensor Cores: dequantized to the FP8 rate
        ("a100_sxm", 312, "BF16"),  # neither FP4 nor FP8 units: the BF16 rate
        ("sn40l_socket", 638, "BF16"),  # no FP4/FP8 rate published: BF16
    ],
)
def test_fp4_without_fp4_units_runs_dequantized_and_says_so(compose, hardware, tflops, rate):
    cfg = compose("hardware=" + hardware, "workload.weight_dtype=nvfp4")
    assert peak_flops(cfg.hardware, "nvfp4") == pytest.approx(tflops * 1e12)
    r = evaluate(cfg)
    assert r.ok, r.reason
    note = [n for n in r.notes if "no FP4 units" in n]
    assert len(note) == 1 and f"runs at the {rate} rate" in note[0] and "0.5625 B" in note[0]


def test_fp4_units_where_the_chip_has_them(compose):
    # a chip with FP4 units (override; no shipped chip has them): 4000 TFLOPS, no note
    cfg = compose("workload.weight_dtype=mxfp4", "hardware.peak_tflops_fp4=4000")
    assert peak_flops(cfg.hardware, "mxfp4") == 4000e12
    assert peak_flops(cfg.hardware, "bf16") == 989.4e12  # other dtypes keep their rates
    assert peak_flops(cfg.hardware, "int4") == 989.4e12  # int4 is not FP4: BF16 rate, as before
    assert not [n for n in evaluate(cfg).notes if "FP4" in n]


def test_fewer_weight_bytes_never_slower(compose):
    # decode at batch 1 is memory-bound: fp8 (1 B) > nvfp4 (0.5625) > mxfp4 (0.53125) > fp4 (0.5)
    tpot = [
        evaluate(compose("workload.weight_dtype=" + d)).metrics["tpot_ms"]
        for d in ("fp8", "nvfp4", "mxfp4", "fp4")
    ]
    assert tpot == sorted(tpot, reverse=True) and tpot[0] > tpot[-1]


def test_bad_dtype_lists_the_fp4_choices(compose):
    r = evaluate(compose("workload.weight_dtype=fp3"))
    assert r.status == "invalid"
    assert "workload.weight_dtype='fp3' is not one of:" in r.reason
    assert "fp4, mxfp4, nvfp4" in r.reason


# ------------------------------------------------------------------------------ cost arithmetic


def test_cost_metrics_golden():
    hw = SimpleNamespace(n_chips=8, tdp_w=700.0, idle_w=100.0, price_per_chip_hour=2.0)
    m = cost.cost_metrics(hw, seconds=2.0, busy=1.5, tokens=1000.0, replicas=1)
    # tokens/s per chip: 1000 tokens / 2 s / 8 chips = 62.5
    assert m["tok_s_per_chip"] == 62.5
    # busy share u = 1.5 / 2 = 0.75; P = 100 + (700 - 100) x 0.75 = 550 W per chip
    assert m["chip_busy_pct"] == 75.0
    assert m["chip_power_w"] == 550.0
    # energy: 550 W x 8 chips x 2 s = 8,800 J over 1000 tokens = 8.8 J/token
    assert m["energy_j_per_token"] == pytest.approx(8.8, rel=1e-15)
    # cost: 2.0 per chip-hour x 8 chips x 2 s / 3600 = 0.008889 for 1000 tokens -> x 1e6 / 1000 = 8.8889
    assert m["cost_per_mtok"] == pytest.approx(2.0 * 8 * 2 / 3600 / 1000 * 1e6, rel=1e-15)
    assert m["cost_per_mtok"] == pytest.approx(8.888888888888889, rel=1e-12)
    # two replicas emit twice the tokens on the same 8 chips: halves every per-token figure
    m2 = cost.cost_metrics(hw, seconds=2.0, busy=1.5, tokens=1000.0, replicas=2)
    assert m2["tok_s_per_chip"] == 125.0 and m2["energy_j_per_token"] == pytest.approx(4.4)


def test_cost_metrics_only_when_known():
    hw = SimpleNamespace(n_chips=1, tdp_w=0.0, idle_w=0.0, price_per_chip_hour=0.0)
    assert cost.cost_metrics(hw, 1.0, 1.0, 10.0, 1) == {"tok_s_per_chip": 10.0}


def test_busy_causes():
    # memory, compute, launch_sync, fill_drain, host, collectives, excess
    assert cost.busy_seconds([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]) == 1.0 + 2.0 + 64.0


def test_static_energy_from_the_time_split(compose):
    # Llama-3.1-70B, DGX H100 (8 chips, TP8, one replica), batch 8, 2.5 per chip-hour
    m = evaluate(
        compose(
            "model=llama3_1_70b",
            "hardware=dgx_h100",
            "workload.batch_size=8",
            "hardware.price_per_chip_hour=2.5",
        )
    ).metrics
    busy = m["tpot_memory_ms"] + m["tpot_compute_ms"] + m["tpot_excess_ms"]
    u = busy / m["tpot_ms"]
    assert m["chip_busy_pct"] == pytest.approx(100 * u, rel=1e-12)
    assert m["chip_power_w"] == pytest.approx(70 + (700 - 70) * u, rel=1e-12)
    # per output token: 8 chips x P x TPOT / 8 sequences
    assert m["energy_j_per_token"] == pytest.approx(8 * m["chip_power_w"] * m["tpot_ms"] / 1e3 / 8, rel=1e-12)
    assert m["tok_s_per_chip"] == pytest.approx(m["tok_s_system"] / 8, rel=1e-12)
    assert m["cost_per_mtok"] == pytest.approx(2.5 / 3600 / m["tok_s_per_chip"] * 1e6, rel=1e-12)


def test_serving_energy_counts_the_gaps_as_idle(compose):
    # open loop at a low rate: the chip waits for arrivals between steps (busy_pct < 100)
    m = evaluate(compose("workload=open_loop", "workload.arrival_rate=2", "workload.n_requests=40")).metrics
    assert m["busy_pct"] < 100
    share = m["busy_pct"] / 100 * (m["time_memory_pct"] + m["time_compute_pct"] + m["time_excess_pct"]) / 100
    assert m["chip_busy_pct"] == pytest.approx(100 * share, rel=1e-9)
    tokens = m["tok_s_aggregate"] * m["makespan_s"]
    energy = (70 + 630 * share) * m["makespan_s"]  # one H100, over the makespan
    assert m["energy_j_per_token"] == pytest.approx(energy / tokens, rel=1e-9)
    assert m["tok_s_per_chip"] == pytest.approx(m["tok_s_system"], rel=1e-12)
    assert "cost_per_mtok" not in m  # no price given


def test_power_fields_are_validated(compose):
    r = evaluate(compose("hardware.tdp_w=-1"))
    assert r.status == "invalid" and "hardware.tdp_w=-1.0 must be >= 0" in r.reason
    r = evaluate(compose("hardware=a100_sxm", "hardware.idle_w=500"))
    assert r.status == "invalid" and "hardware.idle_w=500.0 exceeds hardware.tdp_w=400.0" in r.reason


def test_run_table_shows_the_cost_rows(tmp_path):
    from conftest import decodelab as cli
    from conftest import table_rows

    res = cli(tmp_path, "tracking=off", "hardware.price_per_chip_hour=2")
    assert res.rc == 0, res.explain()
    rows = table_rows(res.out)
    assert float(rows["tokens/s per chip"]) > 0
    assert re.fullmatch(r"\d+ W \(\d+ % busy\) / \d+\.\d{3} J", rows["power per chip / energy per token"])
    assert re.fullmatch(r"\d+\.\d{3}", rows["cost per million tokens"])
