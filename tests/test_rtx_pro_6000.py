"""NVIDIA RTX PRO 6000 Blackwell Server Edition (conf/hardware/rtx_pro_6000_server.yaml): the file's sourced and
derived figures, its measured tables read back at rows they hold (a GEMM, an NVFP4 GEMM, an all-reduce over PCIe Gen5),
no shipped row faster than the physical peak it is checked against, the fitted laws present, and AIConfigurator-schema
rows on the chip run under `decodelab validate` (docs/journal/2026-11-29-rtx-pro-6000-operators.md)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import assert_aic_rows_run, compose_cfg
from decodelab.core.parallel import collective_link
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import collectives, gemm, moe_blocks, registry
from decodelab.paths import DATA_DIR

GRID = list(M_GRID)
CHIP = "rtx_pro_6000_server"
BW = 1597e9  # datasheet: 1,597 GB/s GDDR7 (the Server Edition's)
# AIConfigurator's dense peaks at its host's 2430 MHz max SM clock, below the datasheet's (FLOP/s): the stricter check
AIC_PEAK = {"bfloat16": 467.8e12, "fp8": 935.6e12, "fp8_block": 935.6e12, "nvfp4": 1871.2e12}
KV_BYTES = {"bfloat16": 2, "fp8": 1}


@pytest.fixture(scope="module")
def hw():
    return compose_cfg(f"hardware={CHIP}").hardware


def _read(path):
    return pd.read_csv(DATA_DIR / path) if str(path).endswith(".csv") else pd.read_parquet(DATA_DIR / path)


def test_composes_with_the_sourced_figures(hw):
    # NVIDIA's product page / datasheet: FP16-BF16 / FP8 / FP4 Tensor Core 1 / 2 / 4 PFLOPS with sparsity -> half dense
    assert hw.name == CHIP and hw.execution == "gpu" and hw.n_chips == 1
    assert (hw.peak_tflops_bf16, hw.peak_tflops_fp8, hw.peak_tflops_fp4) == (1000 / 2, 2000 / 2, 4000 / 2)
    # AIConfigurator: 1,024 BF16 FLOP per clock per SM x 188 SMs x 2430 MHz = 467.8 TFLOPS, 6.4% under the datasheet's
    assert 1024 * 188 * 2430e6 == pytest.approx(AIC_PEAK["bfloat16"], rel=1e-4)
    assert AIC_PEAK["bfloat16"] / 1e12 / hw.peak_tflops_bf16 == pytest.approx(0.936, abs=0.001)
    assert hw.memory.hbm.bandwidth_gb_s == BW / 1e9  # not AIConfigurator's 1,792 (the Workstation Edition's)
    # nvidia-smi's 97887 MiB (AIConfigurator mem_capacity 102641958912 B) is 95.59 GiB; the CUDA runtime's 94.97 GiB
    assert 102641958912 / 2**30 == pytest.approx(95.59, abs=0.005) and 102641958912 == 97887 * 2**20
    assert hw.memory.hbm.capacity_gib == 94.97 and 97887 - 94.97 * 1024 == pytest.approx(638, abs=1)
    # PCIe Gen5 x16: 64 GB/s one direction (AIConfigurator intra_node_bw, pcie_bw), to the other GPUs and to the host
    assert hw.link_bw_gb_s == 64 == hw.host_link_gb_s
    # within the 8-GPU server: PCIe, AIConfigurator p2p_latency 10 us
    assert collective_link(hw) == (64, 10.0)
    assert hw.nvlink_domain == 8 and hw.tdp_w == 600 and hw.price_per_chip_hour == 0
    big = compose_cfg(f"hardware={CHIP}", "hardware.tensor_parallel=16").hardware
    assert collective_link(big) == (min(64, 8 * 50), 2 * 10.0 + 20.0)  # across servers: PCIe still the bound


def test_own_tables_load_and_are_not_rescaled(hw):
    t = hw.op_tables
    assert hw.op_model == "fitted" and registry.check(hw) == []
    assert (t.hbm_gb_s, t.peak_tflops_bf16, t.peak_tflops_fp8) == (1597, 500, 1000)
    paths = [t.gemm, *t.gemm_by_engine.values(), t.attention_decode, *t.attention_decode_by_engine.values()]
    paths += [*t.all_reduce_by_engine.values(), t.moe, *t.moe_by_engine.values(), t.mla_decode]
    paths += [
        *t.mla_decode_by_engine.values(),
        *t.linear_attention_by_engine.values(),
        *t.mhc_by_engine.values(),
        t.mla_bmm,
    ]
    assert t.linear_attention == t.linear_attention_by_engine.sglang and t.mhc == t.mhc_by_engine.trtllm
    # every one of the 18 shipped tables of this chip, and nothing else
    assert sorted(paths) == sorted(f"operators/{f.name}" for f in (DATA_DIR / "operators").glob(f"{CHIP}_*"))
    assert len(set(paths)) == 18
    for p in t.all_reduce_by_engine.values():  # the 8-GPU node's tables: 2, 4 and 8 GPUs
        assert collectives.problem(p) is None and set(collectives.collective_curves(p)) == {2, 4, 8}
    # Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128), BF16, one GPU: in each engine's own table
    for p in (t.moe, *t.moe_by_engine.values()):
        assert moe_blocks.block_row(p, "bf16", (2048, 768, 8, 128, 1, 1)) is not None, p


def test_a_gemm_is_its_table_row(hw):
    """TensorRT-LLM 1.3.0rc10's BF16 GEMM at n = k = 4096 and m = 4096 tokens: 2 x 4096^3 = 137.4 GFLOP in 348.0 us as
    measured (395 TFLOP/s, 0.79 of 500), 351.3 us on the table's non-decreasing curve; its NVFP4 GEMM (no law: the
    table is its only cost) 120.2 us."""
    raw = pd.read_parquet(DATA_DIR / hw.op_tables.gemm)
    r = raw[(raw.gemm_dtype == "bfloat16") & (raw.n == 4096) & (raw.k == 4096)].set_index("m").latency_ms
    assert r[4096] * 1e3 == pytest.approx(348.0, abs=0.1)
    row = gemm.measured_row(hw.op_tables.gemm, "bf16", 4096.0, 4096.0)
    assert row[GRID.index(4096.0)] == pytest.approx(r[4096] * 1e-3, rel=0.02)
    assert row[GRID.index(4096.0)] * 1e6 == pytest.approx(351.3, abs=0.1)
    assert row[GRID.index(4096.0)] > 2 * 4096.0**3 / (hw.peak_tflops_bf16 * 1e12)
    fp4 = gemm.measured_row(hw.op_tables.gemm, "nvfp4", 4096.0, 4096.0)
    assert fp4[GRID.index(4096.0)] * 1e6 == pytest.approx(120.2, abs=0.1)
    assert fp4[GRID.index(4096.0)] > 2 * 4096.0**3 / (hw.peak_tflops_fp4 * 1e12)


def test_no_gemm_row_beats_the_compute_or_memory_peak(hw):
    """Every shipped GEMM row: 2 m n k FLOPs in no less than their time at AIConfigurator's clock-scaled dense peak
    (the stricter one; largest BF16 459, FP8 839, NVFP4 1553 TFLOP/s), and its weights (n x k x bytes) read no faster
    than 1,597 GB/s (rows that did, from L2, were raised to that read by tools/aic_chip_tables.py)."""
    t = hw.op_tables
    for path in (t.gemm, *t.gemm_by_engine.values()):
        df = _read(path)
        s = df.latency_ms * 1e-3
        assert (2.0 * df.m * df.n * df.k / s < df.gemm_dtype.map(AIC_PEAK)).all(), path
        weights = df.n * df.k * df.gemm_dtype.map({"bfloat16": 2, "fp8": 1, "fp8_block": 1, "nvfp4": 0.5})
        assert (weights / s <= BW * (1 + 1e-9)).all(), path


def test_decode_attention_and_mla_rows_do_not_beat_the_peak_beyond_l2(hw):
    """No decode attention row above 384 MB of KV (three times the 128 MB L2) reads it faster than 1,597 GB/s (largest:
    1.54 TB/s; TensorRT-LLM 1.3.0rc10's and vLLM 0.19.0's did, up to 3.05 / 3.0 TB/s, so they do not ship); no MLA row
    reads its latent (batch x (step + 1) x 576 x KV bytes) faster at all."""
    t = hw.op_tables
    for path in (t.attention_decode, *t.attention_decode_by_engine.values()):
        df = _read(path)
        per_token = 2 * df.num_key_value_heads * df.head_dim * df.kv_cache_dtype.map(KV_BYTES)  # K and V
        kv = df.batch_size * (df.step + 1) * per_token
        big = kv > 384e6
        assert big.sum() > 1000 and (kv[big] / (df.latency_ms[big] * 1e-3)).max() < BW, path
    for path in (t.mla_decode, *t.mla_decode_by_engine.values()):
        df = _read(path)
        latent = df.batch_size * (df.step + 1) * 576 * df.kv_cache_dtype.map(KV_BYTES)
        assert (latent / (df.latency_ms * 1e-3)).max() < BW, path


def test_no_moe_row_beats_the_compute_peak(hw):
    """Balanced routing: a rank does 2 FLOPs per weight of its 3 x hidden x FFN / moe_tp expert matrices per
    (token, expert) assignment, tokens x top-k / moe_ep of them; no row does them faster than the dense peak."""
    peak = {"bfloat16": 500e12, "fp8": 1000e12, "fp8_block": 1000e12, "int4_wo": 500e12, "nvfp4": 2000e12}
    for path in (hw.op_tables.moe, *hw.op_tables.moe_by_engine.values()):
        df = _read(path)
        cols = 3.0 * df.hidden_size * df.inter_size / df.moe_tp_size
        flops = 2.0 * cols * df.num_tokens * df.topk / df.moe_ep_size
        assert set(df.moe_dtype) <= set(peak), path
        assert (flops / (df.latency_ms * 1e-3) < df.moe_dtype.map(peak)).all(), path


def test_an_all_reduce_at_tp2_over_pcie_gen5_is_its_table_row():
    """vLLM 0.24.0's CUDA-graph all-reduce at 2 GPUs of 4096 x 2 B per token: 16 tokens = 65,536 elements, a measured
    size, cost as measured: 8.2 us over PCIe Gen5, between the L40S's PCIe Gen4 (11.0 us) and the A100's NVLink."""
    t = {}
    for chip in ("a100_sxm", "l40s", CHIP):
        path = compose_cfg(f"hardware={chip}").hardware.op_tables.all_reduce_by_engine.vllm
        raw = pd.read_csv(DATA_DIR / path)
        r = raw[(raw.num_gpus == 2) & (raw.message_size == 65536)].latency_ms
        t[chip] = collectives.collective_row(path, 2, 2.0**13)[GRID.index(16.0)]
        assert t[chip] == pytest.approx(float(r.iloc[0]) * 1e-3, rel=1e-9)
    assert t[CHIP] * 1e6 == pytest.approx(8.18, abs=0.01)
    assert t["l40s"] > t[CHIP] > t["a100_sxm"]


def test_the_fitted_laws_are_present_and_set_the_roofline(hw):
    """fit-hardware's laws for every class its inputs hold; the roofline law's efficiencies are the fitted ones."""
    f = hw.op_fit
    assert set(f.gemm) == {"bf16", "fp8", "fp8_block"}
    assert set(f.attention_prefill) == {f"{d}_hd{h}" for d in ("bf16", "fp8") for h in (64, 128, 256)}
    assert set(f.attention_decode) == {f"{d}_hd{h}" for d in ("bf16", "fp8") for h in (64, 128, 192, 256)}
    assert set(f.all_reduce) == set(f.all_gather) == {"tp2", "tp4", "tp8"}
    assert set(f.all_reduce_by_engine) == {"vllm", "sglang"}
    assert all(set(v) == {"tp2", "tp4", "tp8"} for v in f.all_reduce_by_engine.values())
    assert hw.bw_eff_max == round(f.gemm.bf16.e_b, 2) and hw.compute_eff_max == round(f.gemm.bf16.e_c, 2)
    assert hw.attn_compute_eff_max == round(f.attention_prefill.bf16_hd128.e_a, 2)


@pytest.mark.slow
def test_rows_on_the_chip_run(tmp_path):
    """AIConfigurator-schema rows on rtx_pro_6000_server (placeholder timings: a smoke test, never a fit) run, dense,
    MoE and NVFP4, TP 1-8, under the three engines; none is refused."""
    rows = [
        "a,vllm,0.19.0,Qwen/Qwen3-32B,rtx_pro_6000_server,fp8,agg,1024,256,fp8,,16,2,1,1,,,100,20\n",
        "b,trtllm,1.3.0rc20,Qwen/Qwen3-30B-A3B,rtx_pro_6000_server,nvfp4,agg,1024,256,nvfp4,nvfp4,"
        "16,1,1,1,1,1,100,20\n",
        "c,sglang,0.5.10,Qwen/Qwen3-8B,rtx_pro_6000_server,bfloat16,agg,1024,256,bfloat16,,8,4,1,1,,,100,20\n",
        "d,trtllm,1.3.0rc20,Qwen/Qwen3-32B,rtx_pro_6000_server,bfloat16,agg,1024,256,bfloat16,,8,8,1,1,,,100,20\n",
    ]
    assert_aic_rows_run(tmp_path, rows)
