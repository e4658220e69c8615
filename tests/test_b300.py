"""NVIDIA B300 SXM (conf/hardware/b300_sxm.yaml): the config composes with its datasheet / AIConfigurator
figures (its measured operator tables and against other chips: tests/test_chip_order.py; its
system names and a validate row: tests/test_validation_rows.py)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg


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
