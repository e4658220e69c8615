"""NVIDIA GB300 (conf/hardware/gb300.yaml): the config composes with AIConfigurator's gb300.yaml figures, its
measured operator tables (MoE included) load, its collectives hold the 2 and 4 GPUs AIConfigurator's 4-GPU
node measured (against other chips: tests/test_chip_order.py; its system names and a validate row:
tests/test_validation_rows.py)."""

from __future__ import annotations

import pytest

from conftest import compose_cfg
from decodelab.core import attntable, moetable, optable


@pytest.fixture(scope="module")
def hw():
    return compose_cfg("hardware=gb300").hardware


def test_composes_with_the_sourced_figures(hw):
    # AIConfigurator systems/gb300.yaml @095f58a5 (citing the Blackwell Ultra datasheet), per GPU
    assert hw.name == "gb300" and hw.execution == "gpu" and hw.n_chips == 1
    assert hw.peak_tflops_bf16 == 2500  # bfloat16_tc_flops 2.5e15
    assert hw.peak_tflops_fp8 == 5000  # fp8_tc_flops 5e15
    assert hw.peak_tflops_fp4 == 15000  # fp4_tc_flops 1.5e16
    assert hw.memory.hbm.bandwidth_gb_s == 8000  # mem_bw 8e12
    # mem_capacity 298013687808 B = 284208 MiB reported by nvidia-smi
    assert hw.memory.hbm.capacity_gib == pytest.approx(298013687808 / 2**30, abs=0.05)
    assert hw.link_bw_gb_s == 900  # NVLink5, 9e11 B/s per GPU one direction
    assert hw.host_link_gb_s == 64  # pcie_bw 64e9
    assert hw.tdp_w == 1400  # power 1400 W
    # the tables were measured on this chip: no rescaling of their times
    assert hw.op_tables.hbm_gb_s == hw.memory.hbm.bandwidth_gb_s
    assert hw.op_tables.peak_tflops_bf16 == hw.peak_tflops_bf16
    assert hw.op_tables.peak_tflops_fp8 == hw.peak_tflops_fp8


def test_own_tables_and_fitted_laws(hw):
    """Every table is a gb300_* file that loads; the laws are fitted (GEMM efficiencies are fractions of
    this chip's peaks); collectives hold 2 and 4 GPUs only, as the measured tables do (TP8: roofline)."""
    t = hw.op_tables
    assert hw.op_model == "fitted"
    gemm = [t.gemm, *t.gemm_by_engine.values()]
    ar = list(t.all_reduce_by_engine.values())
    attn = [t.attention_decode, *t.attention_decode_by_engine.values()]
    moe = [t.moe, *t.moe_by_engine.values()]
    engines = {"vllm", "sglang"}
    assert set(t.gemm_by_engine) == set(t.all_reduce_by_engine) == set(t.moe_by_engine) == engines
    for path in gemm + ar + attn + moe:
        assert path.startswith("operators/gb300_"), path
    for path in gemm:
        assert optable.check(path) is None
    for path in ar:
        assert optable.check(path, "all_reduce") is None
        assert set(optable.collective_curves(path)) == {2, 4}
    for path in attn:
        assert attntable.check(path) is None
    for path in moe:
        assert moetable.check(path) is None
    # Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128), BF16, one GPU, in every engine's table
    for path in moe:
        assert moetable.block_row(path, "bf16", (2048, 768, 8, 128, 1, 1)) is not None, path
    for dt in ("bf16", "fp8", "fp8_block"):
        g = hw.op_fit.gemm[dt]
        assert 0.4 < g.e_c < 1.0 and 0.5 < g.e_b < 1.0 and g.t0_us > 0, dt
    for law in hw.op_fit.attention_decode.values():
        assert 0 < law.bw_kv_tbs <= hw.memory.hbm.bandwidth_gb_s / 1000
    tps = {"tp2", "tp4"}
    assert set(hw.op_fit.all_reduce) == set(hw.op_fit.all_gather) == tps
    assert all(set(laws) == tps for laws in hw.op_fit.all_reduce_by_engine.values())
    assert hw.op_fit.sampler.sort.caveat  # the B200's law, said so in every run that uses it
