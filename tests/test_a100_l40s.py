"""NVIDIA A100 SXM and L40S (conf/hardware/a100_sxm.yaml, l40s.yaml): the L40S file's sourced and derived figures,
each chip's measured tables read back at a row they hold (a GEMM, a decode attention, an all-reduce over PCIe), and
AIConfigurator-schema rows on both chips run under `decodelab validate` (docs/journal/2026-11-29-a100-l40s-operators.md)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import assert_aic_rows_run, compose_cfg
from decodelab.core.parallel import collective_link
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import attention_decode as attntable
from decodelab.opcost import collectives, gemm, moe_blocks, registry
from decodelab.paths import DATA_DIR

GRID = list(M_GRID)
CHIPS = ("a100_sxm", "l40s")


@pytest.fixture(scope="module", params=CHIPS)
def hw(request):
    return compose_cfg(f"hardware={request.param}").hardware


def test_l40s_composes_with_the_sourced_figures():
    # NVIDIA L40S datasheet = AIConfigurator systems/l40s.yaml
    hw = compose_cfg("hardware=l40s").hardware
    assert hw.name == "l40s" and hw.execution == "gpu" and hw.n_chips == 1
    assert hw.peak_tflops_bf16 == 362 and hw.peak_tflops_fp8 == 733  # dense (733 / 1,466 with sparsity)
    assert hw.peak_tflops_fp4 == 0  # Ada: no FP4 units
    assert hw.memory.hbm.bandwidth_gb_s == 864
    # nvidia-smi's 46068 MiB (AIConfigurator mem_capacity 48305799168 B) is 44.99 GiB; the CUDA runtime's 44.39 GiB
    assert 48305799168 / 2**30 == pytest.approx(44.99, abs=0.005)
    assert hw.memory.hbm.capacity_gib == 44.39 and 44.99 - 44.39 == pytest.approx(0.6)
    # PCIe Gen4 x16: 64 GB/s bidirectional -> 32 GB/s one direction, to the other GPUs (no NVLink) and to the host
    assert hw.link_bw_gb_s == 64 / 2 == hw.host_link_gb_s
    # within the 8-GPU server: PCIe, AIConfigurator p2p_latency 10 us
    assert collective_link(hw) == (32, 10.0)
    assert hw.nvlink_domain == 8 and hw.tdp_w == 350
    big = compose_cfg("hardware=l40s", "hardware.tensor_parallel=16").hardware
    assert collective_link(big) == (min(32, 8 * 50), 2 * 10.0 + 20.0)  # across servers: PCIe still the bound


def test_own_tables_load_and_are_not_rescaled(hw):
    t = hw.op_tables
    assert hw.op_model == "fitted" and registry.check(hw) == []
    assert (t.hbm_gb_s, t.peak_tflops_bf16) == (hw.memory.hbm.bandwidth_gb_s, hw.peak_tflops_bf16)
    paths = [t.gemm, *t.gemm_by_engine.values(), t.attention_decode, *t.attention_decode_by_engine.values()]
    paths += [*t.all_reduce_by_engine.values(), *t.moe_by_engine.values(), t.mla_decode]
    assert all(p.startswith(f"operators/{hw.name}_") for p in paths)
    for p in t.all_reduce_by_engine.values():
        assert collectives.problem(p) is None and set(collectives.collective_curves(p)) == {2, 4, 8}
    # Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128), BF16, one GPU: SGLang 0.5.10's own
    assert moe_blocks.block_row(t.moe_by_engine.sglang, "bf16", (2048, 768, 8, 128, 1, 1)) is not None


@pytest.mark.parametrize("chip, us", [("a100_sxm", 514.1), ("l40s", 544.3)])
def test_a_gemm_is_its_table_row(chip, us):
    """TensorRT-LLM 1.0.0's BF16 GEMM at n = k = 4096 and m = 4096 tokens, as the table measured it: 2 x 4096^3 =
    137.4 GFLOP in 514.1 us on the A100 (267 TFLOP/s, 0.86 of 312) and 544.3 us on the L40S (252, 0.70 of 362)."""
    hw = compose_cfg(f"hardware={chip}").hardware
    raw = pd.read_parquet(DATA_DIR / hw.op_tables.gemm)
    r = raw[(raw.gemm_dtype == "bfloat16") & (raw.n == 4096) & (raw.k == 4096)].set_index("m").latency_ms
    row = gemm.measured_row(hw.op_tables.gemm, "bf16", 4096.0, 4096.0)
    assert row[GRID.index(4096.0)] == pytest.approx(r[4096] * 1e-3, rel=0.05)
    assert row[GRID.index(4096.0)] * 1e6 == pytest.approx(us, abs=0.1)
    # below the chip's BF16 peak: 2 x 4096^3 FLOP at 312 / 362 TFLOP/s
    assert row[GRID.index(4096.0)] > 2 * 4096.0**3 / (hw.peak_tflops_bf16 * 1e12)


@pytest.mark.parametrize("chip", CHIPS)
def test_a_decode_attention_is_its_table_row(chip):
    """8 sequences x 1024 KV tokens of 8 KV heads x 128 (32 query heads, BF16): the chip's decode attention table
    (A100: vLLM 0.14.0's; L40S: TensorRT-LLM 1.3.0rc20's) at that grid point, never under its KV read at the peak."""
    hw = compose_cfg(f"hardware={chip}").hardware
    path = str(DATA_DIR / hw.op_tables.attention_decode)
    df = pd.read_parquet(path)
    x = df[(df.batch_size == 8) & (df.step == 1023) & (df.num_heads == 32) & (df.num_key_value_heads == 8)]
    x = x[(x.head_dim == 128) & (x.kv_cache_dtype == "bfloat16") & (x.window_size == 0)]
    per_token = 2 * 8 * 128 * 2 / (hw.memory.hbm.bandwidth_gb_s * 1e9)  # K and V of one token at the HBM peak
    g = attntable.measured_grid(path, "bf16", 32, 8, 128)
    got = attntable.table_time(g, per_token, 8, 8 * 1024)
    assert got == pytest.approx(max(float(x.latency_ms.mean()) * 1e-3, per_token * 8 * 1024), rel=0.02)
    assert got >= per_token * 8 * 1024  # 33.6 MB of KV


def test_the_chosen_decode_attention_tables_do_not_beat_the_peak_beyond_l2():
    """A100: none of the shipped rows reads KV faster than 2.039 TB/s. L40S: rows of 16-96 MB of KV do (its 96 MB L2
    holds the collector's KV; the table's floor costs them their HBM read), none above 384 MB."""
    for chip, hbm, beyond in (("a100_sxm", 2039e9, 0), ("l40s", 864e9, 384e6)):
        hw = compose_cfg(f"hardware={chip}").hardware
        for name in (hw.op_tables.attention_decode, *hw.op_tables.attention_decode_by_engine.values()):
            df = pd.read_parquet(DATA_DIR / name)
            kv = df.batch_size * (df.step + 1) * 2 * df.num_key_value_heads * df.head_dim
            kv = kv * df.kv_cache_dtype.map({"bfloat16": 2, "fp8": 1})
            big = kv > beyond
            assert (kv[big] / (df.latency_ms[big] * 1e-3)).max() < hbm, name


def test_an_all_reduce_at_tp2_over_pcie_is_its_table_row():
    """vLLM 0.14.0's CUDA-graph all-reduce at 2 GPUs of 4096 x 2 B per token (Qwen3-8B's hidden): 16 tokens = 65,536
    elements, a measured size, cost as measured; over the L40S's PCIe it takes longer than over the A100's NVLink."""
    t = {}
    for chip in CHIPS:
        path = compose_cfg(f"hardware={chip}").hardware.op_tables.all_reduce_by_engine.vllm
        raw = pd.read_csv(DATA_DIR / path)
        r = raw[(raw.num_gpus == 2) & (raw.message_size == 65536)].latency_ms
        t[chip] = collectives.collective_row(path, 2, 2.0**13)[GRID.index(16.0)]
        assert t[chip] == pytest.approx(float(r.iloc[0]) * 1e-3, rel=1e-9)
    assert t["l40s"] > t["a100_sxm"]


@pytest.mark.slow
def test_rows_on_both_chips_run(tmp_path):
    """AIConfigurator-schema rows on a100_sxm and l40s (placeholder timings: a smoke test, never a fit) run, dense and
    MoE, TP 1-4, under the three engines; none is refused."""
    rows = [
        "a,trtllm,1.0.0,Qwen/Qwen3-8B,a100_sxm,bfloat16,agg,1024,256,bfloat16,,8,1,1,1,,,100,20\n",
        "b,sglang,0.5.9,Qwen/Qwen3-30B-A3B,a100_sxm,bfloat16,agg,1024,256,bfloat16,bfloat16,16,2,1,1,2,1,100,20\n",
        "c,vllm,0.14.0,Qwen/Qwen3-32B,l40s,fp8,agg,1024,256,fp8,,16,4,1,1,,,100,20\n",
        "d,trtllm,1.3.0rc20,Qwen/Qwen3-30B-A3B,l40s,fp8,agg,1024,256,fp8,fp8,16,2,1,1,2,1,100,20\n",
    ]
    assert_aic_rows_run(tmp_path, rows)
