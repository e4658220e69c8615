"""NVIDIA GB200 (conf/hardware/gb200.yaml): the config composes with its datasheet / AIConfigurator
figures (its measured operator tables and against other chips: tests/test_chip_order.py; its
system names and a validate row: tests/test_validation_rows.py)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg


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
    # HBM as the CUDA runtime reports it (a vLLM start-up log: 184.31 GiB), 738 MiB under AIConfigurator's
    # mem_capacity 198674743296 B = 189471 MiB reported by nvidia-smi
    assert hw.memory.hbm.capacity_gib == pytest.approx(184.31)
    assert 189471 - hw.memory.hbm.capacity_gib * 1024 == pytest.approx(738, abs=1)
    assert hw.link_bw_gb_s == 900  # NVLink5, 1.8 TB/s bidirectional per GPU
    assert hw.tdp_w == 1200  # power 1200 W
