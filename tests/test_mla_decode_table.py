"""MLA decode attention from measured tables (hardware.op_tables.mla_decode and its _by_engine
tables, framework/opcost/attention_decode.py, docs/model.md, "Per-shape operator laws"; history:
docs/journal/2026-11-27-mla-decode-tables.md): the spike filter worked by hand, the shipped tables'
rows reproduced at a DeepSeek-V3 design's own shape, the engine's own table and the fallback, the
mappings that keep the roofline, and the kernel against the reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import assert_steps_match_reference, compose_cfg
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import Law, Lin
from decodelab.opcost import attention_decode as attntable
from decodelab.opcost import registry
from decodelab.paths import DATA_DIR

OPS = DATA_DIR / "operators"
TP8 = ("hardware.n_chips=8", "hardware.tensor_parallel=8", "workload.weight_dtype=fp8_block")


def test_a_spike_becomes_a_gap_and_a_steep_cell_does_not():
    """A 3x3 grid (log s) of 10 us cells, 20 us at twice the work in either axis: the centre at
    100 us is more than 2x every neighbour (20 us at most) and has neighbours with more work: a
    gap. At 40 us (2x the largest neighbour, not more) it stays. A corner cell with no measured
    neighbour of more work (the largest call of the grid) stays whatever its time: a kernel may
    slow down more than 2x when the work doubles (a cache that stops holding the KV)."""
    us = np.array([[10.0, 10.0, 20.0], [10.0, 100.0, 20.0], [20.0, 20.0, 500.0]])
    g = np.log(us * 1e-6)
    out = attntable.without_glitches(g)
    assert np.isnan(out[1, 1])
    assert np.isfinite(np.delete(out.ravel(), 4)).all()
    assert np.array_equal(np.delete(out.ravel(), 4), np.delete(g.ravel(), 4))
    us[1, 1] = 40.0
    assert np.isfinite(attntable.without_glitches(np.log(us * 1e-6))).all()


def _meas(path, heads, b, step, kv="bfloat16"):
    df = pd.read_parquet(path)
    x = df[(df.num_heads == heads) & (df.batch_size == b) & (df.step == step) & (df.kv_cache_dtype == kv)]
    return float(x.latency_ms.mean()) * 1e-3


def _attention(*ov):
    cfg = compose_cfg("model=deepseek_v3", "hardware=h200_sxm", *TP8, *ov)
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.name == "attention")
    return d, i


def test_deepseek_v3_decode_attention_is_the_measured_mla_row():
    """DeepSeek-V3 at TP8 on H200 (128 / 8 = 16 heads per GPU over the 512 + 64 latent): its decode
    attention is the table's own row at the grid points, TensorRT-LLM 1.3.0rc20's 18.4 us for one
    sequence of 4096 tokens and 90.9 us for 64 (the roofline law charged 4.1 and 73 us); the floor
    is one latent (576 x 2 bytes) per KV token at the 4.8 TB/s peak, not a K and a V."""
    d, i = _attention("engine=default")
    assert d.op_lin[i, Lin.LAW] == Law.ATTN and d.op_lin[i, Lin.D_TAB] == 1.0
    assert d.op_lin[i, Lin.D_FLOOR] == pytest.approx(576 * 2 / 4800e9, rel=1e-12)
    trt = OPS / "h200_sxm_generation_mla_trtllm_1.3.0rc20.parquet"
    for b, want_us in ((1, 18.4), (64, 90.9)):
        want = _meas(trt, 16, b, 4095)
        assert want * 1e6 == pytest.approx(want_us, abs=0.5)
        assert K._attn_table(d.op_lin, i, float(b), b * 4096.0) == pytest.approx(want, rel=1e-9)


def test_sglang_takes_its_own_table_and_vllm_the_chips():
    """An SGLang design of no named release takes SGLang 0.5.9's table (FlashAttention-3 on Hopper:
    19.7 us at one sequence of 4096 tokens), of release 0.5.1.post1 (the `sglang` file's) 0.5.6.post2's
    (19.9 us); vLLM has no table of its own (its 0.14.0 one was timed eagerly with the absorbed BMMs
    inside) and takes the chip's, TensorRT-LLM's."""
    sg = OPS / "h200_sxm_generation_mla_sglang_0.5.9.parquet"
    sg56 = OPS / "h200_sxm_generation_mla_sglang_0.5.6.post2.parquet"
    trt = OPS / "h200_sxm_generation_mla_trtllm_1.3.0rc20.parquet"
    for engine, path in (("sglang engine.version=", sg), ("sglang", sg56), ("vllm", trt)):
        d, i = _attention(*f"engine={engine}".split())
        assert K._attn_table(d.op_lin, i, 1.0, 4096.0) == pytest.approx(_meas(path, 16, 1, 4095), rel=1e-9)


def test_the_h200_spike_costs_nothing_else():
    """TensorRT-LLM 1.3.0rc20's H200 table measured 32 sequences of 4 tokens at 16 heads in 2.2 ms
    (its neighbours 15 us): made non-decreasing as it stood, every call of 32 or more sequences
    would cost 2.2 ms. Without it, 32 x 4096 tokens is its measured 54 us and the spike's own cell
    is interpolated between its neighbours."""
    path = str(OPS / "h200_sxm_generation_mla_trtllm_1.3.0rc20.parquet")
    assert _meas(path, 16, 32, 3) * 1e3 == pytest.approx(2.223, abs=0.001)
    g = attntable.measured_grid(path, "bf16", 16, 1, 576)
    assert attntable.table_time(g, 0.0, 32, 32 * 4096) == pytest.approx(_meas(path, 16, 32, 4095), rel=1e-9)
    assert attntable.table_time(g, 0.0, 32, 32 * 4) * 1e6 < 20.0


def test_data_parallel_attention_in_serving_takes_the_table_at_all_heads():
    """Serving under data-parallel attention (attention_dp = tp = 8) simulates one group's own
    sequences, each chip attending all 128 heads over whole latents: the table's 128-head rows
    (H200 TensorRT-LLM, one sequence of 4096 tokens)."""
    d, i = _attention("hardware.attention_dp=8", "workload=closed_loop")
    assert d.ops[i].attn_heads == 128 and d.op_lin[i, Lin.D_TAB] == 1.0
    trt = OPS / "h200_sxm_generation_mla_trtllm_1.3.0rc20.parquet"
    assert K._attn_table(d.op_lin, i, 1.0, 4096.0) == pytest.approx(_meas(trt, 128, 1, 4095), rel=1e-9)


@pytest.mark.parametrize("mapping", ["context", "data"])
def test_mappings_that_split_the_sequences_or_the_latent_keep_the_roofline(mapping):
    """Decode context parallelism reads 1/tp of each latent, and a static data-parallel step
    scales its per-sequence costs by the busiest chip's share of the batch: the table, measured
    over whole sequences at the heads it was given, does not describe them; the op keeps the
    roofline, and the design note says so."""
    d, i = _attention(f"hardware.mla_mapping={mapping}")
    assert d.op_lin[i, Lin.D_TAB] == 0.0
    assert any("attention (mla_mapping not replicated)" in n for n in d.notes)


def test_every_shipped_mla_table_is_clean_and_no_row_beats_the_peak():
    for chip, hbm in (("h100_sxm", 3350e9), ("h200_sxm", 4800e9), ("b200_sxm", 8000e9)):
        hw = compose_cfg(f"hardware={chip}").hardware
        assert registry.check(hw) == []
        for name in (hw.op_tables.mla_decode, *hw.op_tables.mla_decode_by_engine.values()):
            df = pd.read_parquet(DATA_DIR / name)
            assert set(df.num_key_value_heads) == {1} and set(df.head_dim) == {576}
            kv = df.batch_size * (df.step + 1) * 576 * df.kv_cache_dtype.map({"bfloat16": 2, "fp8": 1})
            assert (kv / (df.latency_ms * 1e-3)).max() < hbm


@pytest.mark.parametrize("engine", ["default", "sglang"])
def test_kernel_matches_reference_with_the_mla_table(engine):
    cfg = compose_cfg("model=deepseek_v3", "hardware=h200_sxm", *TP8, f"engine={engine}")
    assert_steps_match_reference(cfg, 24, 3000, 4, 3)
