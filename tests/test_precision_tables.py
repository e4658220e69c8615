"""Precision as the hardware runs it (issue 39 item 4): NVFP4 dense GEMMs from the chip's measured
TensorRT-LLM table (framework/opcost/gemm.py table_only), worked by hand on a synthetic table and
read back from the shipped B200 rows; no law and no table keeps the roofline law."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import Lin
from decodelab.opcost import gemm, tables
from decodelab.paths import DATA_DIR

MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384]


def _t_us(m, n, k):
    """Synthetic NVFP4 latency: 10 us floor plus n k / 1e6 us of weights, growing with m / 512."""
    return 10.0 + n * k / 1e6 * (1.0 + m / 512.0)


@pytest.fixture
def fp4_table(tmp_path):
    rows = [
        dict(gemm_dtype="nvfp4", m=m, n=n, k=k, latency_ms=_t_us(m, n, k) * 1e-3)
        for n in (1024, 8192)
        for k in (1024, 8192)
        for m in MS
    ]
    p = tmp_path / "gemm_fp4.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    gemm.curves.cache_clear()
    gemm.measured_row.cache_clear()
    return str(p)


def _op(d, name):
    return next(i for i, op in enumerate(d.ops) if op.name == name)


def test_an_nvfp4_gemm_is_costed_from_the_table_by_hand(fp4_table):
    """Qwen3-32B NVFP4 on one B200 with the synthetic table: o_proj (n = 5120, k = 8192) lies
    between n = 1024 and 8192 at k = 8192; log-bilinear in n at m = 64, t0 0 (no nvfp4 law):
    w = log(5120/1024) / log(8), exp((1 - w) ln t(1024) + w ln t(8192))."""
    cfg = compose_cfg(
        "model=qwen3_32b",
        "hardware=b200_sxm",
        "workload.weight_dtype=nvfp4",
        f"hardware.op_tables.gemm={fp4_table}",
    )
    d = build(cfg)
    i = _op(d, "o_proj")
    assert d.op_lin[i, Lin.G_TAB] == 1.0 and d.op_lin[i, Lin.T0] == 0.0
    w = np.log(5.0) / np.log(8.0)
    lo, hi = _t_us(64, 1024, 8192), _t_us(64, 8192, 8192)  # 19.43718 and 85.49747 us
    by_hand = np.exp((1 - w) * np.log(lo) + w * np.log(hi)) * 1e-6  # 61.1713 us
    assert by_hand == pytest.approx(61.1713e-6, rel=1e-5)
    assert K._table(d.op_lin, i, 64.0) == pytest.approx(by_hand, rel=1e-12)
    # the LM head keeps its 16-bit weights and the bf16 law
    assert d.op_lin[_op(d, "lm_head"), Lin.G_TAB] == 0.0


def test_an_nvfp4_gemm_outside_every_table_keeps_the_roofline_law(fp4_table, tmp_path):
    """A table without nvfp4 rows: no law and no table, so the roofline law (all law columns 0)."""
    p = tmp_path / "bf16_only.csv"
    pd.read_csv(fp4_table).assign(gemm_dtype="bfloat16").to_csv(p, index=False)
    cfg = compose_cfg(
        "model=qwen3_32b", "hardware=b200_sxm", "workload.weight_dtype=nvfp4", f"hardware.op_tables.gemm={p}"
    )
    d = build(cfg)
    i = _op(d, "o_proj")
    assert d.op_lin[i, Lin.LAW] == 0.0 and d.op_lin[i, Lin.G_TAB] == 0.0


def test_the_shipped_b200_table_reproduces_its_nvfp4_rows():
    """The B200's TensorRT-LLM 1.2.0rc5 table (AIConfigurator @095f58a5 gemm_perf.parquet, nvfp4
    rows appended): at n = k = 5120, m = 8192 the measured 137.9 us; at m = 1 16.1 us, where the
    roofline law would read 5120 x 5120 x 0.5625 B at 8 TB/s, 1.8 us."""
    hw = compose_cfg("hardware=b200_sxm").hardware
    raw = pd.read_parquet(DATA_DIR / hw.op_tables.gemm)
    raw = raw[(raw.gemm_dtype == "nvfp4") & (raw.n == 5120) & (raw.k == 5120)]
    by_m = raw.groupby("m").latency_ms.mean() * 1e-3
    assert by_m[8192] == pytest.approx(137.9e-6, abs=0.1e-6)
    row = gemm.measured_row(hw.op_tables.gemm, "nvfp4", 5120.0, 5120.0)
    assert tables.table_time(0.0, row, 8192) == pytest.approx(by_m[8192], rel=1e-9)
    assert tables.table_time(0.0, row, 1) == pytest.approx(16.1e-6, rel=0.05)
