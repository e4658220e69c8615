"""NVIDIA B300 SXM (conf/hardware/b300_sxm.yaml): the config composes with its datasheet / AIConfigurator
figures and its measured operator tables load (against other chips: tests/test_chip_order.py; its
system names and a validate row: tests/test_validation_rows.py)."""

from __future__ import annotations


import pytest

from conftest import compose_cfg
from decodelab.core import attntable, optable


@pytest.fixture(scope="module")
def hw():
    return compose_cfg("hardware=b300_sxm").hardware


def test_composes_with_the_sourced_figures(hw):
    # Blackwell Ultra datasheet per GPU (dense) = AIConfigurator systems/b300_sxm.yaml
    assert hw.name == "b300_sxm" and hw.execution == "gpu" and hw.n_chips == 1
    assert hw.peak_tflops_bf16 == 2250  # bfloat16_tc_flops 2.25e15
    assert hw.peak_tflops_fp8 == 4500  # fp8_tc_flops 4.5e15
    assert hw.peak_tflops_fp4 == 14000  # fp4_tc_flops 1.4e16
    assert hw.memory.hbm.bandwidth_gb_s == 7750  # mem_bw 7.75e12 (62 TB/s / 8 GPUs)
    # mem_capacity 288400343040 B = 275040 MiB reported by nvidia-smi
    assert hw.memory.hbm.capacity_gib == pytest.approx(288400343040 / 2**30, abs=0.05)
    assert hw.link_bw_gb_s == 900  # NVLink5, 1.8 TB/s bidirectional per GPU
    assert hw.host_link_gb_s == 128  # PCIe Gen6, pcie_bw 128e9
    assert hw.tdp_w == 1100  # power 1100 W
    # the tables were measured on this chip: no rescaling of their times
    assert hw.op_tables.hbm_gb_s == hw.memory.hbm.bandwidth_gb_s
    assert hw.op_tables.peak_tflops_bf16 == hw.peak_tflops_bf16
    assert hw.op_tables.peak_tflops_fp8 == hw.peak_tflops_fp8


def test_own_tables_and_fitted_laws(hw):
    """Every table is a b300_sxm_* file that loads; the laws are fitted (GEMM efficiencies are
    fractions of this chip's peaks); collectives hold 2, 4 and 8 GPUs, as the measured tables do."""
    assert hw.op_model == "fitted"
    gemm = [hw.op_tables.gemm, *hw.op_tables.gemm_by_engine.values()]
    ar = list(hw.op_tables.all_reduce_by_engine.values())
    attn = [hw.op_tables.attention_decode, *hw.op_tables.attention_decode_by_engine.values()]
    assert set(hw.op_tables.gemm_by_engine) == set(hw.op_tables.all_reduce_by_engine) == {"vllm", "sglang"}
    for path in gemm + ar + attn:
        assert path.startswith("operators/b300_sxm_"), path
    for path in gemm:
        assert optable.check(path) is None
    for path in ar:
        assert optable.check(path, "all_reduce") is None
        assert set(optable.collective_curves(path)) == {2, 4, 8}
    for path in attn:
        assert attntable.check(path) is None
    for dt in ("bf16", "fp8", "fp8_block"):
        g = hw.op_fit.gemm[dt]
        assert 0.4 < g.e_c < 1.0 and 0.5 < g.e_b < 1.0 and g.t0_us > 0, dt
    for law in hw.op_fit.attention_decode.values():
        assert 0 < law.bw_kv_tbs <= hw.memory.hbm.bandwidth_gb_s / 1000
    tps = {"tp2", "tp4", "tp8"}
    assert set(hw.op_fit.all_reduce) == set(hw.op_fit.all_gather) == tps
    assert all(set(laws) == tps for laws in hw.op_fit.all_reduce_by_engine.values())
    assert hw.op_fit.sampler.sort.caveat  # the B200's law, said so in every run that uses it
