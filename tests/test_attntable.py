"""Decode attention from a measured table (hardware.op_tables.attention_decode and its
_by_engine tables, framework/opcost/attention_decode.py): the log-bilinear interpolation and its floor
worked by hand on a synthetic table, the kernel's twin of it, a design costed from it, the
shipped H100 tables, and a bad table as one error line."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import B_GRID, C_GRID, Lin
from decodelab.opcost import attention_decode as attntable
from decodelab.opcost import registry
from decodelab.paths import DATA_DIR

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
STEPS = [2**i - 1 for i in range(1, 18)]  # a sequence reads step + 1 = 2 .. 131072 tokens


def _t_us(b, c):
    """The synthetic latency: 5 us x sqrt(b c) (b sequences of c KV tokens), log-bilinear in
    (log b, log c), so the kernel's interpolation of it is exact."""
    return 5.0 * math.sqrt(b * c)


def _rows(heads=32, kv_heads=8, steps=STEPS, kv="bfloat16"):
    return [
        dict(batch_size=b, isl=1, num_heads=heads, num_key_value_heads=kv_heads, head_dim=128, window_size=0,
             kv_cache_dtype=kv, step=s, latency_ms=_t_us(b, s + 1) * 1e-3)
        for b in BATCHES
        for s in steps
    ]  # fmt: skip


@pytest.fixture
def table(tmp_path):
    p = tmp_path / "gen.csv"
    pd.DataFrame(_rows()).to_csv(p, index=False)
    attntable.shapes.cache_clear()
    attntable.measured_grid.cache_clear()
    return str(p)


def test_interpolation_floor_and_kernel_by_hand(table):
    """At 3 sequences of 3000 KV tokens (inside the grid, between its powers of two) the time is
    5 sqrt(9000) = 474.34 us; past the grid (4096 sequences) linear in the KV read; below the
    floor the floor: here 1e-9 s per KV token, 9000 tokens -> 9 us < 474 us, so at 1e-7 s per
    token the floor (900 us) wins. The jitted kernel takes the same values."""
    g = attntable.measured_grid(table, "bf16", 32, 8, 128)
    assert g is not None and g.size == len(B_GRID) * len(C_GRID)
    op_lin = np.zeros((1, Lin.size))
    op_lin[0, Lin.TAB : Lin.TAB + g.size] = g
    cases = [
        (3.0, 9000.0, 1e-9, 5.0 * math.sqrt(9000.0)),
        (4096.0, 4096.0 * 64, 1e-9, 5.0 * math.sqrt(2048 * 64) * 2.0),  # 2x the grid's largest batch
        (3.0, 9000.0, 1e-7, 900.0),
    ]
    for seqs, kv, floor, us in cases:
        assert attntable.table_time(g, floor, seqs, kv) * 1e6 == pytest.approx(us, rel=1e-9)
        op_lin[0, Lin.D_FLOOR] = floor
        assert K._attn_table(op_lin, 0, seqs, kv) * 1e6 == pytest.approx(us, rel=1e-9)


def test_a_gap_grows_with_the_kv_read_and_the_grid_never_falls(tmp_path):
    """A table measured only up to 1024 tokens per sequence: beyond, each row grows linearly in the
    KV read from its last measured point (at 4096: 4x the time at 1024, 5 sqrt(b 1024) x 4)."""
    p = tmp_path / "short.csv"
    pd.DataFrame(_rows(steps=[s for s in STEPS if s < 1024])).to_csv(p, index=False)
    attntable.shapes.cache_clear()
    g = attntable.measured_grid(str(p), "bf16", 32, 8, 128)
    t = attntable.table_time(g, 0.0, 8.0, 8 * 4096.0)
    assert t * 1e6 == pytest.approx(5.0 * math.sqrt(8 * 1024) * 4.0, rel=1e-9)
    grid = np.asarray(g).reshape(len(B_GRID), len(C_GRID))
    assert (np.diff(grid, axis=0) >= 0).all() and (np.diff(grid, axis=1) >= 0).all()


def test_a_design_with_the_table_costs_its_decode_attention_from_it(table):
    """Llama-3.1-8B on one H100 (32 query and 8 KV heads per chip, the table's shape): the
    attention op carries the table and its floor, 2 x 8 x 128 x 2 bytes per token over the
    3.35 TB/s HBM peak; at TP2 (16 / 4 heads, not in the table) the class law stays."""
    cfg = compose_cfg(
        "model=llama3_1_8b", "hardware=h100_sxm", f"hardware.op_tables.attention_decode={table}"
    )
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.name == "attention")
    assert d.op_lin[i, Lin.D_TAB] == 1.0
    assert d.op_lin[i, Lin.D_FLOOR] == pytest.approx(2 * 8 * 128 * 2 / 3350e9, rel=1e-12)
    assert K._attn_table(d.op_lin, i, 64.0, 64 * 2048.0) * 1e6 == pytest.approx(
        5.0 * math.sqrt(64 * 2048), rel=1e-9
    )
    cfg2 = compose_cfg(
        "model=llama3_1_8b",
        "hardware=dgx_h100",
        "hardware.n_chips=2",
        f"hardware.op_tables.attention_decode={table}",
    )
    d2 = build(cfg2)
    i2 = next(j for j, op in enumerate(d2.ops) if op.name == "attention")
    assert d2.op_lin[i2, Lin.D_TAB] == 0.0


def test_an_engines_own_table_and_the_fallback(tmp_path, table):
    """attention_decode_by_engine.vllm (the synthetic table at twice the time) costs a vLLM
    design's decode attention; a TensorRT-LLM design keeps the chip's table; a chip whose HBM
    differs from the one the tables were measured on keeps the law."""
    own = tmp_path / "gen_vllm.csv"
    df = pd.DataFrame(_rows())
    pd.DataFrame(df.assign(latency_ms=2 * df.latency_ms)).to_csv(own, index=False)
    base = ("model=llama3_1_8b", "hardware=h100_sxm", f"hardware.op_tables.attention_decode={table}",
            f"hardware.op_tables.attention_decode_by_engine.vllm={own}")  # fmt: skip

    def attn(*ov):
        d = build(compose_cfg(*base, *ov))
        i = next(j for j, op in enumerate(d.ops) if op.name == "attention")
        return d.op_lin, i

    lin, i = attn("engine=vllm")
    assert K._attn_table(lin, i, 64.0, 64 * 2048.0) * 1e6 == pytest.approx(
        10.0 * math.sqrt(64 * 2048), rel=1e-9
    )
    lin, i = attn("engine=default")
    assert K._attn_table(lin, i, 64.0, 64 * 2048.0) * 1e6 == pytest.approx(
        5.0 * math.sqrt(64 * 2048), rel=1e-9
    )
    lin, i = attn("engine=default", "hardware.memory.hbm.bandwidth_gb_s=4000")
    assert lin[i, Lin.D_TAB] == 0.0


def test_the_shipped_h100_tables():
    """Each shipped H100 table reproduces its own rows at the kernel's grid points (Llama-3.1-8B
    shape, 8 sequences x 1024 tokens: TensorRT-LLM 1.3.0rc20 28.1 us; vLLM at TP2 Qwen3-32B's
    32 / 4 heads, 16 x 2048 tokens), and none of their rows reads KV faster than the HBM peak, so
    the floor never binds on them (TensorRT-LLM 1.2.0rc5's table, collected with a K-only cache,
    did: 64 x 4096 tokens of 8 KV heads, 1.07 GB, in 224 us)."""
    hw = compose_cfg("hardware=h100_sxm").hardware
    ops = DATA_DIR / "operators"
    floor = 2 * 8 * 128 * 2 / 3350e9

    def meas(df, b, step, h, kvh):
        x = df[(df.batch_size == b) & (df.step == step) & (df.num_heads == h) & (df.num_key_value_heads == kvh)
               & (df.head_dim == 128) & (df.kv_cache_dtype == "bfloat16") & (df.window_size == 0)]  # fmt: skip
        return float(x.latency_ms.mean()) * 1e-3

    trt = str(ops / "h100_sxm_generation_attention_trtllm_1.3.0rc20.parquet")
    g = attntable.measured_grid(trt, "bf16", 32, 8, 128)
    want = meas(pd.read_parquet(trt), 8, 1023, 32, 8)
    assert attntable.table_time(g, floor, 8, 8 * 1024) == pytest.approx(want, rel=1e-9)
    assert want * 1e6 == pytest.approx(28.1, abs=0.1)
    vllm = str(ops / "h100_sxm_generation_attention_vllm_0.14.0.parquet")
    gv = attntable.measured_grid(vllm, "bf16", 32, 4, 128)
    got = attntable.table_time(gv, floor / 2, 16, 16 * 2048)
    assert got == pytest.approx(meas(pd.read_parquet(vllm), 16, 2047, 32, 4), rel=1e-9)
    for name in (trt, vllm, str(ops / "h100_sxm_generation_attention_sglang_0.5.9.parquet")):
        df = pd.read_parquet(name)
        kv_bytes = df.batch_size * (df.step + 1) * 2 * df.num_key_value_heads * df.head_dim
        kv_bytes = kv_bytes * df.kv_cache_dtype.map({"bfloat16": 2, "fp8": 1})
        assert (kv_bytes / (df.latency_ms * 1e-3)).max() < 3350e9
    assert registry.check(hw) == []


def test_a_bad_table_is_one_error_line(tmp_path):
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    p = tmp_path / "t.csv"
    p.write_text("a,b\n1,2\n")
    attntable.shapes.cache_clear()
    cfg = compose_cfg("hardware=h100_sxm", f"hardware.op_tables.attention_decode={p}")
    with pytest.raises(ConfigError, match="hardware.op_tables.attention_decode: ") as e:
        check_config(cfg)
    assert "not a decode attention table" in str(e.value) and "\n" not in str(e.value).strip()


@pytest.mark.slow
def test_fit_hardware_names_the_generation_attention_file_as_the_table(tmp_path):
    from conftest import cli

    p = tmp_path / "generation_attention.csv"
    pd.DataFrame(_rows()).assign(attn_dtype="bfloat16").to_csv(p, index=False)
    out = tmp_path / "fit.yaml"
    r = cli(tmp_path, "fit-hardware", str(p), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"op_tables:\n  attention_decode: {p.resolve()}\n" in out.read_text()


@pytest.mark.parametrize("chip, hbm", [("h200_sxm", 4800e9), ("b200_sxm", 8000e9)])
def test_the_h200_and_b200_tables(chip, hbm):
    """H200 and B200 carry their own measured tables (TensorRT-LLM 1.3.0rc20, vLLM, SGLang): each
    holds its rows at the grid points (within 2%: the grid is made non-decreasing, and B200's
    32 x 2048-token row is 0.06% below a smaller one), none reads KV faster than the chip's HBM
    peak, and a
    Qwen3-32B TP8 design on the chip costs its decode attention from the engine's own table."""
    hw = compose_cfg(f"hardware={chip}").hardware
    assert registry.check(hw) == []
    tables = [hw.op_tables.attention_decode, *hw.op_tables.attention_decode_by_engine.values()]
    for name in tables:
        path = str(DATA_DIR / name)
        df = pd.read_parquet(path)
        kv_bytes = df.batch_size * (df.step + 1) * 2 * df.num_key_value_heads * df.head_dim
        kv_bytes = kv_bytes * df.kv_cache_dtype.map({"bfloat16": 2, "fp8": 1})
        assert (kv_bytes / (df.latency_ms * 1e-3)).max() < hbm
        x = df[(df.num_heads == 8) & (df.num_key_value_heads == 1) & (df.head_dim == 128)]
        x = x[(x.kv_cache_dtype == "bfloat16") & (x.batch_size == 32) & (x.step == 2047)]
        g = attntable.measured_grid(path, "bf16", 8, 1, 128)
        assert attntable.table_time(g, 0.0, 32, 32 * 2048) == pytest.approx(
            x.latency_ms.mean() * 1e-3, rel=0.02
        )
    for engine in ("default", "vllm", "sglang"):
        cfg = compose_cfg("model=qwen3_32b", f"hardware={chip}", "hardware.n_chips=8", f"engine={engine}")
        d = build(cfg)
        i = next(j for j, op in enumerate(d.ops) if op.name == "attention")
        assert d.op_lin[i, Lin.D_TAB] == 1.0
