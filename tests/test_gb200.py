"""NVIDIA GB200 (conf/hardware/gb200.yaml): the config composes with its datasheet / AIConfigurator
figures and its measured operator tables load (against other chips: tests/test_chip_order.py; its
system names and a validate row: tests/test_validation_rows.py)."""

from __future__ import annotations


import pytest

from conftest import compose_cfg
from decodelab.core import attntable, optable


@pytest.fixture(scope="module")
def hw():
    return compose_cfg("hardware=gb200").hardware


def test_composes_with_the_sourced_figures(hw):
    # NVIDIA GB200 NVL72 datasheet per GPU (dense) = AIConfigurator systems/gb200.yaml
    assert hw.name == "gb200" and hw.execution == "gpu" and hw.n_chips == 1
    assert hw.peak_tflops_bf16 == 2500  # bfloat16_tc_flops 2.5e15
    assert hw.peak_tflops_fp8 == 5000  # fp8_tc_flops 5e15
    assert hw.peak_tflops_fp4 == 10000  # fp4_tc_flops 1e16
    assert hw.memory.hbm.bandwidth_gb_s == 8000  # mem_bw 8e12
    # mem_capacity 198674743296 B = 189471 MiB reported by nvidia-smi
    assert hw.memory.hbm.capacity_gib == pytest.approx(189471 / 1024, abs=0.05)
    assert hw.link_bw_gb_s == 900  # NVLink5, 1.8 TB/s bidirectional per GPU
    assert hw.tdp_w == 1200  # power 1200 W
    # the tables were measured on this chip: no rescaling of their times
    assert hw.op_tables.hbm_gb_s == hw.memory.hbm.bandwidth_gb_s
    assert hw.op_tables.peak_tflops_bf16 == hw.peak_tflops_bf16
    assert hw.op_tables.peak_tflops_fp8 == hw.peak_tflops_fp8


def test_own_tables_and_fitted_laws(hw):
    """Every table is a gb200_* file that loads; the laws are fitted (GEMM efficiencies are
    fractions of this chip's peaks); collectives hold 2 and 4 GPUs, as the measured tables do."""
    assert hw.op_model == "fitted"
    gemm = [hw.op_tables.gemm, *hw.op_tables.gemm_by_engine.values()]
    ar = list(hw.op_tables.all_reduce_by_engine.values())
    attn = [hw.op_tables.attention_decode, *hw.op_tables.attention_decode_by_engine.values()]
    assert set(hw.op_tables.gemm_by_engine) == set(hw.op_tables.all_reduce_by_engine) == {"vllm", "sglang"}
    for path in gemm + ar + attn:
        assert path.startswith("operators/gb200_"), path
    for path in gemm:
        assert optable.check(path) is None
    for path in ar:
        assert optable.check(path, "all_reduce") is None
        assert set(optable.collective_curves(path)) == {2, 4}
    for path in attn:
        assert attntable.check(path) is None
    for dt in ("bf16", "fp8", "fp8_block"):
        g = hw.op_fit.gemm[dt]
        assert 0.4 < g.e_c < 1.0 and 0.5 < g.e_b < 1.0 and g.t0_us > 0, dt
    for law in hw.op_fit.attention_decode.values():
        assert 0 < law.bw_kv_tbs <= hw.memory.hbm.bandwidth_gb_s / 1000
    assert set(hw.op_fit.all_reduce) == set(hw.op_fit.all_gather) == {"tp2", "tp4"}
    assert hw.op_fit.sampler.sort.caveat  # the B200's law, said so in every run that uses it
