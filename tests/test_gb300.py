"""NVIDIA GB300 (conf/hardware/gb300.yaml): the config composes with AIConfigurator's gb300.yaml figures
(its measured operator tables, MoE included, and its 2- and 4-GPU collectives, and against other chips:
tests/test_chip_order.py; its system names and a validate row: tests/test_validation_rows.py)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg


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
