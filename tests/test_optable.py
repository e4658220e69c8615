"""GEMM costs from a measured table (hardware.op_tables.gemm, framework/opcost/gemm.py): the
interpolation worked by hand on a small synthetic table, the kernel's twin of it, the shipped
H100 table reproducing its own rows, and a bad table as one error line."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import CAUSES, M_GRID, N_MGRID, Law, Lin, Step
from decodelab.opcost import collectives, gemm, registry, tables
from decodelab.opcost.base import Ctx
from decodelab.paths import DATA_DIR

MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384]


def _t_us(m, n, k):
    """The synthetic table's latency: weights stream at (n k / 1e6) us, activations add m / 256."""
    return n * k / 1e6 * (1.0 + m / 256.0)


@pytest.fixture
def table(tmp_path):
    rows = [
        dict(gemm_dtype="bfloat16", m=m, n=n, k=k, latency_ms=_t_us(m, n, k) * 1e-3)
        for n in (1024, 4096)
        for k in (1024, 4096)
        for m in MS
    ]
    p = tmp_path / "gemm.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    gemm.curves.cache_clear()
    gemm.measured_row.cache_clear()
    return str(p)


def test_curve_at_a_grid_shape_and_between_grid_shapes(table):
    m, t = gemm.curve(table, "bf16", 1024.0, 1024.0)
    assert list(m) == MS
    # n = k = 1024 at m = 64: 1.048576 us x 1.25 = 1.31072 us
    assert t[MS.index(64)] == pytest.approx(1.31072e-6, rel=1e-12)
    # n = 2048 lies half-way between 1024 and 4096 in log n: the geometric mean of the two curves,
    # sqrt(1.048576 x 4.194304) = 2.097152 us of weights, x 1.25 at m = 64 = 2.62144 us
    _, t = gemm.curve(table, "bf16", 2048.0, 1024.0)
    assert t[MS.index(64)] == pytest.approx(2.62144e-6, rel=1e-12)
    # outside the (n, k) grid, or a dtype the table lacks: no curve (the class law applies)
    assert gemm.curve(table, "bf16", 8192.0, 1024.0) is None
    assert gemm.curve(table, "fp8", 1024.0, 1024.0) is None


def test_row_and_natural_form_and_kernel_agree(table):
    """The per-op row (at the kernel's M_GRID), its natural form and the jitted kernel's
    interpolation are one function: by hand at n = 2048, k = 1024 (t = 2.097152 (1 + m / 256) us,
    linear in m, so interpolating it is exact)."""
    t0, beyond = gemm.gemm_row(gemm.measured_row(table, "bf16", 2048.0, 1024.0), 1e-6)
    # t0 = min(the class law's 1 us, the fastest call 2.097152 x (1 + 1/256) = 2.105344 us) = 1 us
    assert t0 == pytest.approx(1e-6)
    grid = np.asarray(M_GRID)
    # M_GRID's 48 is not a table m: linear between 32 and 64 -> 2.097152 x (1 + 48/256) = 2.490368 us
    assert beyond[list(grid).index(48.0)] + t0 == pytest.approx(2.490368e-6, rel=1e-12)
    op_lin = np.zeros((1, Lin.size))
    op_lin[0, Lin.TAB : Lin.TAB + N_MGRID] = beyond
    for m in (1.0, 7.0, 100.0, 300.0, 5000.0, 16384.0, 20000.0):
        by_hand = _t_us(m, 2048, 1024) * 1e-6  # beyond 16384 the last segment's slope continues
        assert tables.table_time(t0, beyond, m) == pytest.approx(by_hand, rel=1e-9)
        assert K._table(op_lin, 0, m) + t0 == pytest.approx(by_hand, rel=1e-9)


def test_a_design_with_the_table_costs_its_gemms_from_it(table):
    """Llama-3.1-8B on one H100 with the synthetic table: qkv_proj (n = 6144, outside the table's
    n grid) keeps the bf16 law; o_proj (n = k = 4096) is costed by the table: its kernel time at
    m = 64 is the table's 16.777216 x 1.25 = 20.97152 us."""
    cfg = compose_cfg("model=llama3_1_8b", "hardware=h100_sxm", f"hardware.op_tables.gemm={table}")
    d = build(cfg)
    by = {op.name: i for i, op in enumerate(d.ops)}
    assert d.op_lin[by["qkv_proj"], Lin.G_TAB] == 0.0
    i = by["o_proj"]
    assert d.op_lin[i, Lin.G_TAB] == 1.0
    t0 = d.op_lin[i, Lin.T0]
    assert t0 == pytest.approx(cfg.hardware.op_fit.gemm.bf16.t0_us * 1e-6)
    assert K._table(d.op_lin, i, 64.0) + t0 == pytest.approx(20.97152e-6, rel=1e-12)


def test_a_dip_in_the_measured_curve_is_pooled(tmp_path):
    """Isotonic regression of log latency, by hand: a curve 10, 10, 12, 9 us at m = 1, 2, 4, 8
    (then rising) pools its dip (12, 9) at the geometric mean sqrt(12 x 9) = 10.3923 us."""
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    us = [10, 10, 12, 9, 13, 14, 15, 16, 17, 18]
    rows = [dict(gemm_dtype="bfloat16", m=m, n=1024, k=1024, latency_ms=t * 1e-3) for m, t in zip(ms, us)]
    p = tmp_path / "dip.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    t0, beyond = gemm.gemm_row(gemm.measured_row(str(p), "bf16", 1024.0, 1024.0), 1e-6)
    got = [tables.table_time(t0, beyond, m) * 1e6 for m in (1, 4, 6, 8, 16)]
    # m = 6 lies between the pooled 4 and 8 (both 10.3923); m = 16 is measured (13)
    assert got == pytest.approx([10.0, 10.3923, 10.3923, 10.3923, 13.0], abs=1e-4)


def test_the_shipped_h100_table_reproduces_its_rows():
    """Where the measured curve rises the shipped H100 table costs a GEMM at its measured latency
    (block-scaled FP8, n = k = 5120, m = 8192 / 16384; below, its tile-boundary sawtooth, e.g.
    64 us at m = 1024 and 82 us at 1025, is pooled)."""
    hw = compose_cfg("hardware=h100_sxm").hardware
    path = hw.op_tables.gemm
    raw = pd.read_parquet(DATA_DIR / path)
    raw = raw[(raw.gemm_dtype == "fp8_block") & (raw.n == 5120) & (raw.k == 5120)]
    by_m = raw.groupby("m").latency_ms.mean() * 1e-3
    row = gemm.measured_row(path, "fp8_block", 5120.0, 5120.0)
    t0, beyond = gemm.gemm_row(row, hw.op_fit.gemm.fp8_block.t0_us * 1e-6)
    for m in (8192, 16384):
        assert tables.table_time(t0, beyond, m) == pytest.approx(by_m[m], rel=1e-9)
    # and the law's cost is non-decreasing over the kernel's token grid
    assert np.all(np.diff(beyond) >= 0.0)


def test_outside_the_table_the_class_law_stays(table):
    fit = SimpleNamespace(
        gemm={"bf16": SimpleNamespace(e_c=0.77, k0=0.0, e_b=0.83, t0_us=3.3, p=3.9)},
        attention_prefill={},
        attention_decode={},
        all_reduce={},
        all_gather={},
    )
    hw = compose_cfg("hardware=h100_sxm").hardware
    hw = SimpleNamespace(
        op_model="fitted",
        op_fit=fit,
        op_tables=SimpleNamespace(gemm=table),
        peak_tflops_bf16=hw.peak_tflops_bf16,
        peak_tflops_fp8=hw.peak_tflops_fp8,
        memory=hw.memory,
    )
    w = SimpleNamespace(weight_dtype="bf16", kv_dtype="bf16")

    def op(n, k):
        return SimpleNamespace(
            gemm_n=n, gemm_k=k, attn_head_dim=0, in_attention_call=False, coll_kind="", coll_bytes_per_token=0
        )

    ctx = Ctx(hw, w.weight_dtype, w.kv_dtype)
    inside, outside = gemm.price(op(1024, 1024), ctx), gemm.price(op(65536, 1024), ctx)
    assert inside.tab is not None and outside.tab is None
    assert outside.law[0] is fit.gemm["bf16"]


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such file"),
        ("a,b\n1,2\n", "not a GEMM table (misses column(s) gemm_dtype, m, n, k, latency_ms)"),
        ("gemm_dtype,m,n,k,latency_ms\nint4,1,2,3,0.1\n", "needs rows of bfloat16"),
    ],
)
def test_a_bad_table_is_one_error_line(tmp_path, content, words):
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    p = tmp_path / "t.csv"
    if content is not None:
        p.write_text(content)
    gemm.curves.cache_clear()
    cfg = compose_cfg("hardware=h100_sxm", f"hardware.op_tables.gemm={p}")
    with pytest.raises(ConfigError, match="hardware.op_tables.gemm: ") as e:
        check_config(cfg)
    assert words in str(e.value) and "\n" not in str(e.value).strip()


def test_leave_one_out_by_hand():
    """t = (n + 1024) ns at n = 1024, 2048, 4096 (k = 1024, every m): n = 2048 predicted from its
    neighbours is sqrt(2048 x 5120) = 3238.17 against 3072, |error| 5.41%; k has no interior
    grid value, so no k points."""
    rows = [
        dict(gemm_dtype="bfloat16", m=m, n=n, k=1024, latency_ms=(n + 1024) * 1e-6)
        for n in (1024, 2048, 4096)
        for m in MS
    ]
    loo = gemm.leave_one_out(pd.DataFrame(rows))
    points, mean, median = loo["bf16"]["n"]
    assert points == len(MS)
    assert mean == pytest.approx(100 * (np.sqrt(2048 * 5120) / 3072 - 1), rel=1e-9)
    assert mean == pytest.approx(5.4094, abs=1e-3) and median == pytest.approx(mean)
    assert loo["bf16"]["k"][0] == 0


def test_fit_hardware_names_the_gemm_file_as_the_table(tmp_path, table):
    from conftest import cli

    out = tmp_path / "fit.yaml"
    r = cli(tmp_path, "fit-hardware", table, "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert f"op_tables:\n  gemm: {table}\n" in text
    assert "interpolation error" in r.stdout + r.stderr + text


def test_the_lm_head_stays_16_bit_under_fp8_weights():
    """Qwen3-32B with block-scaled FP8 weights on one H100: the LM head keeps BF16 weights
    (TensorRT-LLM's LMHead takes no quant config; components/ops.py): 5120 x 151936 x 2 B =
    1,555,824,640 B read per step, costed by the bf16 GEMM law (n = 151936 lies outside the table's
    n grid); the decoder GEMMs stay fp8_block, and the embedding table is held at 2 B too."""
    cfg = compose_cfg(
        "model=qwen3_32b", "hardware=h100_sxm", "workload.weight_dtype=fp8_block", "workload.kv_dtype=fp8"
    )
    d = build(cfg)
    by = {op.name: (i, op) for i, op in enumerate(d.ops)}
    i, head = by["lm_head"]
    assert head.weight_bytes == 5120 * 151936 * 2 and head.gemm_dtype == "bf16"
    law = cfg.hardware.op_fit.gemm.bf16
    bw = cfg.hardware.memory.hbm.bandwidth_gb_s * 1e9
    assert d.op_lin[i, Lin.G_TAB] == 0.0
    assert d.op_lin[i, Lin.G_CM] == pytest.approx(151936 * 5120 * 2.0 / (bw * law.e_b), rel=1e-12)
    _, qkv = by["qkv_proj"]
    assert qkv.gemm_dtype == "" and qkv.weight_bytes == 5120 * (64 + 16) * 128 * 1.0
    # BF16 weights: nothing changes for the head
    bf = build(compose_cfg("model=qwen3_32b", "hardware=h100_sxm"))
    head_bf = next(op for op in bf.ops if op.name == "lm_head")
    assert head_bf.weight_bytes == head.weight_bytes and head_bf.gemm_dtype == ""
    # both tables (embedding and head) at 2 B: the totals differ by the decoder weights only
    assert bf.weight_bytes_total - d.weight_bytes_total == pytest.approx(
        (bf.weight_bytes_total - 2 * 2 * 151936 * 5120) / 2, rel=1e-12
    )


def test_a_chip_with_other_peaks_scales_the_table():
    """A chip that inherits h100_sxm.yaml and changes its HBM bandwidth (an H200 built on it, as in
    examples/user_conf/hardware/my_chip.yaml) scales each tabulated GEMM time by the class law's
    time on it over the law's time on the H100 the table measured, so more bandwidth is faster and
    the table's shape-by-shape correction stays; the run says so. By hand for o_proj (n = k = 4096,
    bf16, m = 1): the factor is the law's time at 4800 GB/s over its time at 3350 GB/s."""
    from decodelab.modes.dispatch import evaluate

    cfg_h = compose_cfg("model=llama3_1_8b", "hardware=h100_sxm")
    cfg = compose_cfg("model=llama3_1_8b", "hardware=h100_sxm", "hardware.memory.hbm.bandwidth_gb_s=4800")
    h100, other = build(cfg_h), build(cfg)
    i = next(j for j, op in enumerate(h100.ops) if op.name == "o_proj")
    assert h100.op_lin[i, Lin.G_TAB] == 1.0 and other.op_lin[i, Lin.G_TAB] == 1.0
    law = cfg.hardware.op_fit.gemm.bf16
    here = float(gemm.gemm_time(law, 1, 4096, 4096, 989.4e12, 4.8e12, 2.0, 2.0))
    there = float(gemm.gemm_time(law, 1, 4096, 4096, 989.4e12, 3.35e12, 2.0, 2.0))
    t_h = K._table(h100.op_lin, i, 1.0) + h100.op_lin[i, Lin.T0]
    t_o = K._table(other.op_lin, i, 1.0) + other.op_lin[i, Lin.T0]
    assert t_o == pytest.approx(t_h * here / there, rel=1e-9) and t_o < t_h
    r_h, r_o = evaluate(cfg_h), evaluate(cfg)
    assert r_o.metrics["tpot_ms"] < r_h.metrics["tpot_ms"]
    notes = [n for n in r_o.notes if "op_tables.gemm" in n]
    assert len(notes) == 1 and "hbm_gb_s 3350 (this chip 4800)" in notes[0] and "scaled" in notes[0], notes
    assert not [n for n in r_h.notes if "op_tables.gemm" in n]


def test_the_h100_all_reduce_is_trtllm_1_0_0rc3s():
    """The H100 all-reduce laws are fitted to the shipped TensorRT-LLM 1.0.0rc3 table (the version of
    conf/engine/default.yaml): the fit reproduces the YAML; at 8 x 5120 BF16 elements (81,920 B) TP4
    costs 3.658 + 81920 / 220.7e9 s = 4.029 us, where 1.2.0rc5's strategy switch gave 11 us."""
    from decodelab.calibration import fit as F
    from decodelab.calibration import operators as O

    hw = compose_cfg("hardware=h100_sxm").hardware
    data = O.load([DATA_DIR / "operators" / "h100_sxm_allreduce_trtllm_1.0.0rc3.csv"])
    fits = {f["key"]: f["law"] for f in F.fit_all(data, hw) if f["group"] == "all_reduce"}
    assert set(fits) == {"tp2", "tp4", "tp8"}
    for key, law in fits.items():
        for field in F.COLL_FIELDS:
            assert getattr(law, field) == pytest.approx(float(hw.op_fit.all_reduce[key][field]), rel=1e-3)
    t = collectives.collective_time(hw.op_fit.all_reduce.tp4, 8 * 5120 * 2.0)
    assert float(t) * 1e6 == pytest.approx(3.658 + 81920 / 220.7e9 * 1e6, rel=1e-9)
    assert float(t) * 1e6 == pytest.approx(4.029, abs=1e-3)


def test_the_all_reduce_table_by_hand(tmp_path):
    """An all-reduce table at 4 GPUs, 10 us at 1 MiB and 40 us at 4 MiB (BF16 elements): a 2 MiB
    message lies half-way in log size, so log-log interpolation gives sqrt(10 x 40) = 20 us; below
    the smallest size the smallest time; above the largest, its time per byte (8 MiB: 80 us)."""
    rows = [
        dict(framework="TRTLLM", allreduce_dtype="bfloat16", num_gpus=4, message_size=e, latency_ms=t)
        for e, t in ((2**19, 0.010), (2**21, 0.040))
    ]
    p = tmp_path / "ar.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    collectives.collective_curves.cache_clear()
    collectives.collective_row.cache_clear()
    # bytes per token 2**14 (8192 elements x 2 B): M_GRID tokens 64 -> 1 MiB, 128 -> 2 MiB, 512 -> 8 MiB
    row = collectives.collective_row(str(p), 4, 2.0**14)
    grid = list(M_GRID)
    assert row[grid.index(1.0)] == pytest.approx(10e-6)
    assert row[grid.index(64.0)] == pytest.approx(10e-6)
    assert row[grid.index(128.0)] == pytest.approx(20e-6, rel=1e-12)
    assert row[grid.index(512.0)] == pytest.approx(80e-6, rel=1e-12)
    assert collectives.collective_row(str(p), 8, 2.0**14) is None  # no row at 8 GPUs: the law


def test_the_h100_all_reduce_is_costed_from_its_table():
    """On the H100, TensorRT-LLM's all-reduce (TP4, Qwen3-32B: 5120 x 2 B per token) comes from the
    shipped 1.0.0rc3 table; the kernel's collective time equals the reference's and, at 64 tokens
    (655,360 B = 327,680 elements, between the measured 262,144 and 524,288), the log-log
    interpolation of the measured 8.4 and 13.3 us. vLLM's design takes vLLM's own table instead
    (op_tables.all_reduce_by_engine): at TP8 and 16 tokens (81,920 elements, between the measured
    65,536 at 7.7 us and 131,072 at 14.7 us) log-log interpolation, 9.5 us, where its law gives
    5.7 us; with no table of its own, its law."""
    from decodelab.core.reference import reference_step

    cfg = compose_cfg("model=qwen3_32b", "hardware=dgx_h100", "hardware.tensor_parallel=4")
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.coll_kind == "all_reduce")
    assert d.op_lin[i, Lin.LAW] == Law.COLL and d.op_lin[i, Lin.G_TAB] == 1.0
    raw = pd.read_csv(DATA_DIR / "operators" / "h100_sxm_allreduce_trtllm_1.0.0rc3.csv")
    r4 = raw[raw.num_gpus == 4].set_index("message_size").latency_ms * 1e-3
    w = (np.log(327680) - np.log(262144)) / (np.log(524288) - np.log(262144))
    by_hand = np.exp((1 - w) * np.log(r4[262144]) + w * np.log(r4[524288]))
    assert K._table(d.op_lin, i, 64.0) == pytest.approx(by_hand, rel=1e-9)
    out, _ = _step(d, 64.0)
    ref = reference_step(d, cfg, 1.0, 1024.0, 64.0)
    assert out[CAUSES.index("collectives")] == pytest.approx(ref["collectives"], rel=1e-9)
    vllm = build(
        compose_cfg("model=qwen3_32b", "hardware=dgx_h100", "hardware.tensor_parallel=4", "engine=vllm")
    )
    j = next(j for j, op in enumerate(vllm.ops) if op.coll_kind == "all_reduce")
    assert vllm.op_lin[j, Lin.G_TAB] == 1.0
    v_cfg = compose_cfg("model=qwen3_32b", "hardware=dgx_h100", "hardware.tensor_parallel=8", "engine=vllm")
    v8 = build(v_cfg)
    j = next(j for j, op in enumerate(v8.ops) if op.coll_kind == "all_reduce")
    raw = pd.read_csv(DATA_DIR / "operators" / "h100_sxm_allreduce_vllm_0.14.0.csv")
    r8 = raw[raw.num_gpus == 8].set_index("message_size").latency_ms * 1e-3
    assert (r8[65536], r8[131072]) == pytest.approx((7.7e-6, 14.7e-6), abs=0.05e-6)
    w = (np.log(81920) - np.log(65536)) / (np.log(131072) - np.log(65536))
    by_hand = np.exp((1 - w) * np.log(r8[65536]) + w * np.log(r8[131072]))
    assert K._table(v8.op_lin, j, 16.0) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand == pytest.approx(9.5e-6, abs=0.1e-6)
    law = collectives.collective_time(v_cfg.hardware.op_fit.all_reduce_by_engine.vllm.tp8, 16 * 5120 * 2.0)
    assert float(law) == pytest.approx(5.7e-6, abs=0.1e-6)
    out, _ = _step(v8, 16.0)
    ref = reference_step(v8, v_cfg, 1.0, 1024.0, 16.0)
    assert out[CAUSES.index("collectives")] == pytest.approx(ref["collectives"], rel=1e-9)
    no_table = compose_cfg(
        "model=qwen3_32b", "hardware=dgx_h100", "hardware.tensor_parallel=8", "engine=vllm",
        "hardware.op_tables.all_reduce_by_engine.vllm=",
    )  # fmt: skip
    assert build(no_table).op_lin[j, Lin.G_TAB] == 0.0


def _step(d, seqs):
    """One decode step of `seqs` sequences at 1024 KV tokens each, by the kernel."""
    steps = np.zeros((1, Step.size))
    steps[0, Step.QTOK], steps[0, Step.CTX], steps[0, Step.SEQS], steps[0, Step.OUT] = 1.0, 1024.0, seqs, 1.0
    return K.simulate(*d.arrays(), steps)[0], steps


def test_a_bad_all_reduce_table_is_one_error_line(tmp_path):
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    p = tmp_path / "ar.csv"
    p.write_text("num_gpus,latency_ms\n4,0.01\n")
    collectives.collective_curves.cache_clear()
    for path, words in ((tmp_path / "none.csv", "no such file"), (p, "not an all-reduce table")):
        cfg = compose_cfg("hardware=h100_sxm", f"hardware.op_tables.all_reduce={path}")
        with pytest.raises(ConfigError, match="hardware.op_tables.all_reduce: ") as e:
            check_config(cfg)
        assert words in str(e.value)
        cfg = compose_cfg("hardware=h100_sxm", f"hardware.op_tables.all_reduce_by_engine.vllm={path}")
        with pytest.raises(ConfigError, match="hardware.op_tables.all_reduce_by_engine.vllm: ") as e:
            check_config(cfg)
        assert words in str(e.value) and "\n" not in str(e.value)


ENGINE_TABLES = [
    (chip, engine, name)
    for chip, vllm in (("h100_sxm", "vllm_0.14.0"), ("h200_sxm", "vllm_0.14.0"), ("b200_sxm", "vllm_0.19.0"))
    for engine, name in (("vllm", vllm), ("sglang", "sglang_0.5.9"))
]


@pytest.mark.parametrize("chip, engine, name", ENGINE_TABLES)
def test_the_engines_own_all_reduce_laws_are_fitted_to_the_shipped_tables(chip, engine, name):
    """op_fit.all_reduce_by_engine.<engine> of each chip is what decodelab fit-hardware gives on the
    shipped table the same engine's all-reduces are costed from (its CUDA-graph rows)."""
    from decodelab.calibration import fit as F
    from decodelab.calibration import operators as O

    hw = compose_cfg(f"hardware={chip}").hardware
    assert hw.op_tables.all_reduce_by_engine[engine] == f"operators/{chip}_allreduce_{name}.csv"
    data = O.load([DATA_DIR / "operators" / f"{chip}_allreduce_{name}.csv"])
    fits = {f["key"]: f["law"] for f in F.fit_all(data, hw) if f["group"] == "all_reduce_by_engine"}
    assert set(fits) == {f"{engine}.tp{n}" for n in (2, 4, 8)}
    for key, law in fits.items():
        own = hw.op_fit.all_reduce_by_engine[engine][key.split(".")[1]]
        for field in F.COLL_FIELDS:
            assert getattr(law, field) == pytest.approx(float(own[field]), rel=2e-3)


def test_fit_hardware_names_the_all_reduce_files_as_the_tables(tmp_path):
    """Two all-reduce files, TensorRT-LLM's and vLLM's own (`framework` column): fit-hardware
    fits a law to each and names each file as the chip's table for that kernel; the fragment is
    valid YAML whose op_tables the hardware schema takes."""
    import yaml
    from conftest import cli

    sizes = [2**k for k in range(7, 24)]
    for fw, name in (("TRTLLM", "ar_trt.csv"), ("vLLM", "ar_vllm.csv")):
        rows = [
            dict(framework=fw, allreduce_dtype="bfloat16", num_gpus=n, message_size=e, latency_ms=(4 + e / 2e5) * 1e-3)
            for n in (2, 4)
            for e in sizes
        ]  # fmt: skip
        pd.DataFrame(rows).to_csv(tmp_path / name, index=False)
    out = tmp_path / "fit.yaml"
    r = cli(
        tmp_path,
        "fit-hardware",
        str(tmp_path / "ar_trt.csv"),
        str(tmp_path / "ar_vllm.csv"),
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    frag = yaml.safe_load(out.read_text())
    assert frag["op_tables"] == {
        "all_reduce": str((tmp_path / "ar_trt.csv").resolve()),
        "all_reduce_by_engine": {"vllm": str((tmp_path / "ar_vllm.csv").resolve())},
    }
    assert set(frag["op_fit"]["all_reduce"]) == {"tp2", "tp4"}
    assert set(frag["op_fit"]["all_reduce_by_engine"]["vllm"]) == {"tp2", "tp4"}
    cfg = compose_cfg(
        "hardware=h100_sxm",
        f"hardware.op_tables.all_reduce={frag['op_tables']['all_reduce']}",
        f"hardware.op_tables.all_reduce_by_engine.vllm={frag['op_tables']['all_reduce_by_engine']['vllm']}",
    )
    assert registry.check(cfg.hardware) == []


def test_an_engines_own_gemm_table(tmp_path, table):
    """op_tables.gemm_by_engine.<family>: that engine's GEMMs come from its own table where it holds
    the dtype and shape, else from op_tables.gemm. The engine's synthetic table is the fixture's
    at twice the time and measured up to m = 4096 only: o_proj (n = k = 4096) of a vLLM design
    at m = 64 costs 2 x 20.97152 us; past m = 4096 the time goes on along the last measured
    segment, m = 1024 to 4096 (at m = 16384, by hand below); a TensorRT-LLM design keeps the
    chip's table; a dtype the engine table lacks (fp8) falls back to the chip's table."""
    rows = [
        dict(gemm_dtype="bfloat16", m=m, n=n, k=k, latency_ms=2 * _t_us(m, n, k) * 1e-3)
        for n in (1024, 4096)
        for k in (1024, 4096)
        for m in MS[:-1]  # up to m = 4096
    ]
    own = tmp_path / "gemm_vllm.csv"
    pd.DataFrame(rows).to_csv(own, index=False)
    fp8 = tmp_path / "gemm_fp8.csv"  # the chip's table with an fp8 curve too
    pd.DataFrame(
        [dict(gemm_dtype=dt, m=m, n=4096, k=4096, latency_ms=_t_us(m, 4096, 4096) * 1e-3) for dt in ("bfloat16", "fp8") for m in MS]
    ).to_csv(fp8, index=False)  # fmt: skip
    base = ("model=llama3_1_8b", "hardware=h100_sxm", f"hardware.op_tables.gemm_by_engine.vllm={own}")

    def o_proj(*ov):
        d = build(compose_cfg(*base, *ov))
        i = next(j for j, op in enumerate(d.ops) if op.name == "o_proj")
        return d, i

    d, i = o_proj(f"hardware.op_tables.gemm={table}", "engine=vllm")
    t0 = d.op_lin[i, Lin.T0]
    assert K._table(d.op_lin, i, 64.0) + t0 == pytest.approx(2 * 20.97152e-6, rel=1e-12)
    # beyond m = 4096: the last segment (1024 -> 4096) continued, by hand
    t1024, t4096 = 2 * _t_us(1024, 4096, 4096), 2 * _t_us(4096, 4096, 4096)
    beyond = t4096 + (t4096 - t1024) / 3072 * (16384 - 4096)
    assert K._table(d.op_lin, i, 16384.0) + t0 == pytest.approx(beyond * 1e-6, rel=1e-12)
    d, i = o_proj(f"hardware.op_tables.gemm={table}", "engine=default")
    assert K._table(d.op_lin, i, 64.0) + d.op_lin[i, Lin.T0] == pytest.approx(20.97152e-6, rel=1e-12)
    d, i = o_proj(f"hardware.op_tables.gemm={fp8}", "engine=vllm", "workload.weight_dtype=fp8")
    assert K._table(d.op_lin, i, 64.0) + d.op_lin[i, Lin.T0] == pytest.approx(20.97152e-6, rel=1e-12)


@pytest.mark.parametrize("chip", ["h100_sxm", "h200_sxm", "b200_sxm"])
def test_the_engine_gemm_tables(chip):
    """The shipped engine GEMM tables of each chip (`_by_engine`, read by a design of no named
    release): vLLM (bf16 and per-tensor fp8; its block-scaled FP8 rows were timed outside CUDA graphs
    and are not shipped) and SGLang 0.5.9, each reproducing its own rows at a grid shape and costing
    that engine's design; a bad one is one error line."""
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    hw = compose_cfg(f"hardware={chip}").hardware
    for eng, dtypes in (("vllm", {"bfloat16", "fp8"}), ("sglang", {"bfloat16", "fp8", "fp8_block"})):
        path = hw.op_tables.gemm_by_engine[eng]
        assert path.startswith(f"operators/{chip}_gemm_{eng}_")
        raw = pd.read_parquet(DATA_DIR / path)
        assert set(raw.gemm_dtype) == dtypes
        r = raw[(raw.gemm_dtype == "bfloat16") & (raw.n == 4096) & (raw.k == 4096)].set_index("m").latency_ms
        row = gemm.measured_row(path, "bf16", 4096.0, 4096.0)
        assert row[list(M_GRID).index(4096.0)] == pytest.approx(r[4096] * 1e-3, rel=0.05)
        d = build(compose_cfg("model=llama3_1_8b", f"hardware={chip}", f"engine={eng}", "engine.version="))
        i = next(j for j, op in enumerate(d.ops) if op.name == "o_proj")  # n = k = 4096
        assert K._table(d.op_lin, i, 4096.0) + d.op_lin[i, Lin.T0] == pytest.approx(
            row[list(M_GRID).index(4096.0)], rel=1e-9
        )
    if chip != "h100_sxm":
        return
    cfg = compose_cfg("hardware=h100_sxm", "hardware.op_tables.gemm_by_engine.vllm=/no/such.csv")
    with pytest.raises(ConfigError, match="hardware.op_tables.gemm_by_engine.vllm: ") as e:
        check_config(cfg)
    assert "no such file" in str(e.value) and "\n" not in str(e.value)
