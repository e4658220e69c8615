"""Per-shape operator laws (decodelab.opcost, hardware.op_model=fitted): hand-worked
golden values, the kernel's per-op constants against the natural form, and the fit
(decodelab.calibration, `decodelab fit-hardware`) on small synthetic CSVs made by the law."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import cli, compose_cfg
from decodelab.calibration import fit as F
from decodelab.calibration import operators as O
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import CAUSES, M_GRID, Acc, Hw, Law, Lin
from decodelab.opcost import attention_decode, attention_prefill, collectives, gemm
from decodelab.opcost.base import Ctx

P_BF16, P_FP8, BW = 989.4e12, 1978.9e12, 3.35e12  # H100 SXM datasheet (conf/hardware/h100_sxm.yaml)
GEMM_BF16 = SimpleNamespace(e_c=0.7684, k0=97.9, e_b=0.8293, t0_us=3.301, p=3.915)
GEMM_FP8 = SimpleNamespace(e_c=0.6447, k0=0.0, e_b=0.8571, t0_us=14.89, p=1.193)
PRE_BF16 = SimpleNamespace(e_a=0.5125, tau_tok_ns=0.4826, tau_seq_ns=13.65, t0_us=13.64)
DEC_BF16 = SimpleNamespace(c_sk_ns=30.35, bw_kv_tbs=3.313, t0_us=10.12, p=1.77)
AR_TP2 = SimpleNamespace(a_lo_us=3.339, a_hi_us=32.1, s_switch_bytes=1.186e7, beta_gb_s=311.6)
AR_TP8 = SimpleNamespace(a_lo_us=3.831, a_hi_us=14.77, s_switch_bytes=1.854e5, beta_gb_s=220.7)


def test_gemm_golden_values():
    # bf16, m=1, n=k=4096: Tc = 2*4096*(4096+97.9)*1/(989.4e12*0.7684) = 0.045191 us;
    # Tm = (4096^2*2 + 1*(4096*2 + 2*4096)) / (3.35e12*0.8293) = 12.0839 us; Tc/Tm = 0.0037 so
    # the knee term is Tm (1 + 0.0037^3.915)^(1/3.915) = 12.0839 -> t = 12.0839 + 3.301 = 15.3849 us
    t = gemm.gemm_time(GEMM_BF16, 1, 4096, 4096, P_BF16, BW, 2.0, 2.0)
    assert float(t) * 1e6 == pytest.approx(15.3849, abs=2e-4)
    # bf16, m=128, n=6144, k=4096: Tc = 128 * 0.067786 = 8.6766 us; Tm = 18.1169 + 128 * 0.0073718
    # = 19.0605 us; pnorm = 19.0605 (1 + (8.6766/19.0605)^3.915)^(1/3.915) = 19.2803 -> 22.5813 us
    t = gemm.gemm_time(GEMM_BF16, 128, 6144, 4096, P_BF16, BW, 2.0, 2.0)
    assert float(t) * 1e6 == pytest.approx(22.5813, abs=2e-3)
    # fp8 (wb 1, ab 4), m=1, n=k=4096: Tc = 2*4096*4096/(1978.9e12*0.6447) = 0.0263 us,
    # Tm = (4096^2 + 4096*4 + 2*4096)/(3.35e12*0.8571) = 5.8517 us;
    # pnorm_1.193 = 5.8517 (1 + 0.0045^1.193)^(1/1.193) = 5.8594 -> + 14.89 = 20.7494 us
    t = gemm.gemm_time(GEMM_FP8, 1, 4096, 4096, P_FP8, BW, 1.0, 4.0)
    assert float(t) * 1e6 == pytest.approx(20.7494, abs=2e-3)


def test_attention_golden_values():
    # prefill bf16 hd128, b=1, s=128, h=8: pairs = 128*129/2 = 8256;
    # 8256 * 4*8*128/(989.4e12*0.5125) = 0.0667 us; 128 * 8 * 0.4826 ns = 0.4942 us;
    # 8 * 13.65 ns = 0.1092 us; + 13.64 us -> 14.3101 us
    t = attention_prefill.prefill_attention_time(PRE_BF16, 8256, 128, 1, 8, 128, P_BF16)
    assert float(t) * 1e6 == pytest.approx(14.3101, abs=2e-4)
    # decode KV bf16 hd128, b=1, step=1023 (1024 KV tokens), kvh=8: x = 30.35 ns * 8 = 0.2428 us;
    # B = 1024 * 2*8*128*2 = 4,194,304 B -> y = B / 3.313 TB/s = 1.2660 us;
    # pnorm_1.77(0.2428, 1.2660) = 1.3040 -> + 10.12 = 11.4240 us
    t = attention_decode.decode_attention_time(DEC_BF16, 1, 1024, 8, 128, 2.0)
    assert float(t) * 1e6 == pytest.approx(11.4240, abs=2e-4)


def test_collective_golden_values():
    # TRT-LLM all-reduce, 2 GPUs, 16 KiB < S*: 3.339 + 16384 / 311.6e9 s = 3.3916 us
    assert float(collectives.collective_time(AR_TP2, 16384)) * 1e6 == pytest.approx(3.3916, abs=1e-4)
    # 8 GPUs, 1 MiB >= S* = 185.4 KB: 14.77 + 1048576 / 220.7e9 s = 14.77 + 4.7511 = 19.5211 us
    assert float(collectives.collective_time(AR_TP8, 2**20)) * 1e6 == pytest.approx(19.5211, abs=1e-4)


def _one_op_step(cfg, name, tokens, kv_read, pairs, seqs, prefill):
    """Seconds the kernel charges the op `name` in one step (its call alone), split by cause."""
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.name == name)
    out = np.zeros(len(CAUSES))
    acc = (
        np.zeros((len(d.calls), d.tier_bw.shape[0])),
        np.zeros((len(d.calls), Acc.size)),
        np.zeros((len(d.calls), 2)),
    )
    keep = d.op_call == d.op_call[i]
    f = 1.0 if prefill else 0.0
    K.step_core(
        d.op_call[keep] * 0,
        d.op_w[keep],
        d.op_lin[keep],
        d.call_rep[d.op_call[i] : d.op_call[i] + 1] * 0 + 1.0,
        d.call_cost[d.op_call[i] : d.op_call[i] + 1],
        d.tier_bw,
        d.kv_frac,
        d.hw,
        tokens,
        seqs,
        kv_read,
        pairs,
        seqs,
        f * tokens,
        f * kv_read,
        f * pairs,
        f * seqs,
        acc[0][:1],
        acc[1][:1],
        acc[2][:1],
        out,
    )
    return out, d


def test_kernel_constants_match_the_natural_form():
    """Llama-3.1-8B on one H100 (fitted, GEMMs by their class law: no table; the table path is
    tests/test_optable.py; decode attention by its law: no table, tests/test_attntable.py): the
    kernel's GEMM and attention calls cost exactly the law, the host term aside, and pay no sync_us
    (t0 holds the kernel boundary)."""
    cfg = compose_cfg(
        "model=llama3_1_8b",
        "hardware=h100_sxm",
        "hardware.op_tables.gemm=",
        "hardware.op_tables.attention_decode=",
    )
    out, d = _one_op_step(cfg, "qkv_proj", 128.0, 0.0, 0.0, 1.0, False)
    law = cfg.hardware.op_fit.gemm.bf16
    want = gemm.gemm_time(law, 128, 6144, 4096, P_BF16, BW, 2.0, 2.0)  # qkv: (32 + 2*8) * 128 = 6144
    host = d.hw[Hw.HOST_STEP]
    assert out.sum() - host == pytest.approx(float(want), rel=1e-12)
    assert out[CAUSES.index("launch_sync")] == pytest.approx(law.t0_us * 1e-6, rel=1e-12)
    # decode attention, 64 sequences with 2048 KV tokens each
    out, _ = _one_op_step(cfg, "attention", 64.0, 64 * 2048.0, 64 * 2048.0, 64.0, False)
    want = attention_decode.decode_attention_time(
        cfg.hardware.op_fit.attention_decode.bf16_hd128, 64, 64 * 2048, 8, 128, 2.0
    )
    assert out.sum() - host == pytest.approx(float(want), rel=1e-12)
    # prefill attention, 2 sequences of 1024 tokens
    pairs = 2 * 1024 * 1025 / 2
    out, _ = _one_op_step(cfg, "attention", 2048.0, 2048.0, pairs, 2.0, True)
    want = attention_prefill.prefill_attention_time(
        cfg.hardware.op_fit.attention_prefill.bf16_hd128, pairs, 2048, 2, 32, 128, P_BF16
    )
    assert out.sum() - host == pytest.approx(float(want), rel=1e-12)


def test_fitted_skips_rope_and_roofline_keeps_it():
    fitted = build(compose_cfg("model=llama3_1_8b", "hardware=h100_sxm"))
    roof = build(compose_cfg("model=llama3_1_8b", "hardware=h100_sxm", "hardware.op_model=roofline"))
    i = next(j for j, op in enumerate(fitted.ops) if op.name == "rope_kv_write")
    assert fitted.op_lin[i, Lin.LAW] == Law.SKIP and roof.op_lin[i, Lin.LAW] == Law.NONE
    assert fitted.calls_per_step == roof.calls_per_step - 32  # one kernel per layer fewer
    assert np.all(roof.op_lin[:, Lin.LAW :] == 0.0)
    # A100's own microbenchmarks (conf/hardware/a100_sxm.yaml, 2026-11-29) fit its laws; roofline when asked
    a100 = build(compose_cfg("model=llama3_1_8b", "hardware=a100_sxm"))
    assert np.any(a100.op_lin[:, Lin.LAW :] != 0.0)
    a100 = build(compose_cfg("model=llama3_1_8b", "hardware=a100_sxm", "hardware.op_model=roofline"))
    assert np.all(a100.op_lin[:, Lin.LAW :] == 0.0)


# ---- the fit on synthetic CSVs made by the law


def _hw():
    return compose_cfg("hardware=h100_sxm").hardware


def _noisy(t, rng, sigma=0.005):
    return t * np.exp(rng.normal(0.0, sigma, np.shape(t)))


def test_fit_recovers_gemm_and_attention_parameters(tmp_path):
    rng = np.random.default_rng(0)
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    shapes = [(n, k) for n in (1024, 4096, 14336) for k in (1024, 4096, 8192)]
    m, n, k = (np.array(x, float) for x in zip(*[(a, b, c) for a in ms for b, c in shapes]))
    t = gemm.gemm_time(GEMM_BF16, m, n, k, P_BF16, BW, 2.0, 2.0)
    pd.DataFrame(
        {
            "gemm_dtype": "bfloat16",
            "m": m.astype(int),
            "n": n.astype(int),
            "k": k.astype(int),
            "latency_ms": _noisy(t, rng) * 1e3,
        }
    ).to_csv(tmp_path / "gemm.csv", index=False)
    rows = [(b, s, h) for b in (1, 2, 4, 8) for s in (128, 256, 512, 1024, 2048) for h in (8, 16, 32, 64)]
    b, s, h = (np.array(x, float) for x in zip(*rows))
    t = attention_prefill.prefill_attention_time(PRE_BF16, b * s * (s + 1) / 2, b * s, b, h, 128, P_BF16)
    ctx = pd.DataFrame(
        {
            "batch_size": b.astype(int),
            "isl": s.astype(int),
            "num_heads": h.astype(int),
            "num_key_value_heads": 8,
            "head_dim": 128,
            "window_size": 0,
            "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "latency_ms": _noisy(t, rng) * 1e3,
        }
    )
    ctx.to_csv(tmp_path / "ctx.csv", index=False)
    rows = [(b, st, kvh) for b in (1, 4, 16, 64, 256) for st in (127, 511, 2047, 8191) for kvh in (1, 4, 8)]
    b, st, kvh = (np.array(x, float) for x in zip(*rows))
    t = attention_decode.decode_attention_time(DEC_BF16, b, b * (st + 1), kvh, 128, 2.0)
    gen = pd.DataFrame(
        {
            "batch_size": b.astype(int),
            "isl": 1,
            "num_heads": (kvh * 4).astype(int),
            "num_key_value_heads": kvh.astype(int),
            "head_dim": 128,
            "window_size": 0,
            "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "step": st.astype(int),
            "latency_ms": _noisy(t, rng) * 1e3,
        }
    )
    gen.to_csv(tmp_path / "gen.csv", index=False)
    fits = {(f["group"], f["key"]): f for f in F.fit_all(O.load([tmp_path]), _hw())}
    g = fits[("gemm", "bf16")]["law"]
    for name, rel in (("e_c", 0.02), ("e_b", 0.02), ("t0_us", 0.05), ("p", 0.1), ("k0", 0.25)):
        assert getattr(g, name) == pytest.approx(getattr(GEMM_BF16, name), rel=rel), name
    a = fits[("attention_prefill", "bf16_hd128")]["law"]
    for name in ("e_a", "tau_tok_ns", "t0_us"):
        assert getattr(a, name) == pytest.approx(getattr(PRE_BF16, name), rel=0.05), name
    dec = fits[("attention_decode", "bf16_hd128")]["law"]
    for name in ("c_sk_ns", "bw_kv_tbs", "t0_us", "p"):
        assert getattr(dec, name) == pytest.approx(getattr(DEC_BF16, name), rel=0.05), name
    assert all(f["new"]["mape"] < 1.5 for f in fits.values())  # noise 0.5%


def test_fit_recovers_a_collective(tmp_path):
    sizes = 2 ** np.arange(7, 28, dtype=float)  # elements, bf16
    t = collectives.collective_time(AR_TP8, sizes * 2.0)
    pd.DataFrame(
        {
            "allreduce_dtype": "bfloat16",
            "num_gpus": 8,
            "message_size": sizes.astype(int),
            "latency_ms": t * 1e3,
        }
    ).to_csv(tmp_path / "ar.csv", index=False)
    (f,) = F.fit_all(O.load([tmp_path / "ar.csv"]), _hw())
    law = f["law"]
    assert (f["group"], f["key"]) == ("all_reduce", "tp8")
    assert law.a_lo_us == pytest.approx(3.831, rel=0.01) and law.a_hi_us == pytest.approx(14.77, rel=0.01)
    assert law.beta_gb_s == pytest.approx(220.7, rel=0.01)
    assert 131072 < law.s_switch_bytes <= 262144  # between the measured sizes around S* = 185.4 KB


def _cli(*args):
    return cli(Path.cwd(), "fit-hardware", *args)  # in this process


def test_cli_writes_a_fragment_that_composes(tmp_path):
    sizes = 2 ** np.arange(7, 28, dtype=float)
    pd.DataFrame(
        {
            "allreduce_dtype": "bfloat16",
            "num_gpus": 2,
            "message_size": sizes.astype(int),
            "latency_ms": collectives.collective_time(AR_TP2, sizes * 2.0) * 1e3,
        }
    ).to_csv(tmp_path / "ar.csv", index=False)
    out = tmp_path / "fit.yaml"
    r = _cli(str(tmp_path / "ar.csv"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "op_model: fitted" in text and "all_reduce:" in text and "tp2:" in text
    assert "# fitted to ar.csv (21 rows); class MAPE" in text


@pytest.mark.parametrize(
    "content, words",
    [
        ("a,b\n1,2\n", "not an operator CSV"),
        ("gemm_dtype,m,n,latency_ms\nbfloat16,1,2,0.1\n", "misses column(s) k"),
        ("gemm_dtype,m,n,k,latency_ms\nbfloat16,1,2,3,abc\n", "latency_ms has non-numeric"),
        ("gemm_dtype,m,n,k,latency_ms\n", "has no rows"),
    ],
)
def test_bad_csv_is_one_error_line(tmp_path, content, words):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    r = _cli(str(p))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr


def test_bad_op_model_is_one_error_line():
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    cfg = compose_cfg("hardware=h100_sxm", "hardware.op_model=table")
    with pytest.raises(ConfigError, match="hardware.op_model='table' is not one of: roofline, fitted"):
        check_config(cfg)
    cfg = compose_cfg("hardware=h100_sxm", "hardware.op_fit.gemm.bf16.e_c=1.5")
    with pytest.raises(ConfigError, match=r"hardware.op_fit.gemm.bf16.e_c=1.5 must be in \(0.0, 1.0\]"):
        check_config(cfg)


GEMM_FP8_BLOCK = SimpleNamespace(e_c=0.6127, k0=45.89, e_b=0.8148, t0_us=5.505, p=1.0)


@pytest.mark.slow
def test_fp8_block_gemm_golden_and_class():
    """Block-scaled FP8 weights (Qwen3 / DeepSeek FP8 checkpoints) are costed by their own GEMM class,
    fitted to the fp8_block rows of the same microbenchmark: at decode sizes its fixed cost is a
    third of per-tensor FP8's (t0 5.5 vs 14.9 us)."""
    # m=1, n=k=4096: Tc = 2*4096*(4096+45.89)/(1978.9e12*0.6127) = 0.028 us;
    # Tm = (4096^2 + 4096*4 + 2*4096)/(3.35e12*0.8148) = 6.1553 us; p = 1: Tc + Tm = 6.1833 us -> + 5.505 = 11.6883 us
    t = gemm.gemm_time(GEMM_FP8_BLOCK, 1, 4096, 4096, P_FP8, BW, 1.0, 4.0)
    assert float(t) * 1e6 == pytest.approx(11.6883, abs=2e-3)
    cfg = compose_cfg(
        "model=qwen3_32b", "hardware=h100_sxm", "workload.weight_dtype=fp8_block", "workload.kv_dtype=fp8"
    )
    law = cfg.hardware.op_fit.gemm.fp8_block
    assert (law.e_c, law.t0_us) == (GEMM_FP8_BLOCK.e_c, GEMM_FP8_BLOCK.t0_us)
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.name == "qkv_proj")
    # the kernel's constants: A_c = 2 n (k + k0) / (P e_c), C_m = n k wb / (BW e_b)
    n, k = d.ops[i].gemm_n, d.ops[i].gemm_k
    assert d.op_lin[i, Lin.T0] == pytest.approx(5.505e-6, rel=1e-12)
    assert d.op_lin[i, Lin.G_AC] == pytest.approx(2 * n * (k + 45.89) / (P_FP8 * 0.6127), rel=1e-12)
    assert d.op_lin[i, Lin.G_CM] == pytest.approx(n * k * 1.0 / (BW * 0.8148), rel=1e-12)


def test_fp8_block_without_its_class_uses_the_fp8_law():
    """A chip fitted without block-scaled GEMM rows costs fp8_block weights by its per-tensor FP8 law."""
    fit = SimpleNamespace(
        gemm={"fp8": GEMM_FP8}, attention_prefill={}, attention_decode={}, all_reduce={}, all_gather={}
    )
    hw = SimpleNamespace(op_model="fitted", op_fit=fit)
    op = SimpleNamespace(
        gemm_n=4096, attn_head_dim=0, in_attention_call=False, coll_kind="", coll_bytes_per_token=0
    )
    w = SimpleNamespace(weight_dtype="fp8_block", kv_dtype="fp8")
    assert gemm.law_of(op, Ctx(hw, w.weight_dtype, w.kv_dtype))[0] is GEMM_FP8
    assert gemm.law_of(op, Ctx(hw, "bf16", "bf16"))[0] is None


def test_decode_rows_faster_than_hbm_are_not_fitted():
    """A decode-attention row whose KV read beats the HBM peak did not read HBM; the fit drops it.
    By hand: batch 8 x (4095 + 1) tokens x 2 (K, V) x 1 KV head x 128 x 2 B = 16.78 MB; at 3.35 TB/s
    that takes 5.01 us, so a 6 us row stays and a 4 us row goes (and nothing goes without a peak)."""
    row = dict(isl=1, num_heads=8, num_key_value_heads=1, head_dim=128, window_size=0, attn_dtype="bfloat16")
    df = pd.DataFrame(
        [
            dict(row, batch_size=8, step=4095, kv_cache_dtype="bfloat16", latency_ms=ms)
            for ms in (0.006, 0.004)
        ]
    )
    df["t"] = df.latency_ms * 1e-3
    assert 8 * 4096 * 2 * 128 * 2 / 3.35e12 == pytest.approx(5.008e-6, rel=1e-3)
    kept = O.generation_rows(df, "bf16", 128, 3.35e12, 2.0)
    assert kept.latency_ms.tolist() == [0.006]
    assert len(O.generation_rows(df, "bf16", 128)) == 2
    # an FP8 cache moves half the bytes: both rows are slower than 2.50 us
    assert len(O.generation_rows(df.assign(kv_cache_dtype="fp8"), "fp8", 128, 3.35e12, 1.0)) == 2


def test_an_engines_own_all_reduce_law(tmp_path):
    """An all-reduce CSV with a `framework` column fits that engine's law
    (op_fit.all_reduce_by_engine.<framework>), which costs that engine family's all-reduces; other
    engines and the TP degrees it has no law for keep TensorRT-LLM's. By hand at TP4 for 8 x 5120
    BF16 elements (81,920 B): vLLM's law 4.736 us + 81,920 / 215.6 GB/s = 5.116 us (below its
    370.7 KB switch); TensorRT-LLM 1.0.0rc3's 3.658 us + 81,920 / 220.7 GB/s = 4.029 us (below its
    1.483 MB switch)."""
    sizes = 2 ** np.arange(7, 28, dtype=float)
    vllm_tp4 = SimpleNamespace(a_lo_us=4.736, a_hi_us=8.937, s_switch_bytes=3.707e5, beta_gb_s=215.6)
    pd.DataFrame(
        {
            "framework": "vllm",
            "allreduce_dtype": "bfloat16",
            "num_gpus": 4,
            "message_size": sizes.astype(int),
            "latency_ms": collectives.collective_time(vllm_tp4, sizes * 2.0) * 1e3,
        }
    ).to_csv(tmp_path / "allreduce_vllm.csv", index=False)
    (f,) = F.fit_all(O.load([tmp_path / "allreduce_vllm.csv"]), _hw())
    assert (f["group"], f["key"]) == ("all_reduce_by_engine", "vllm.tp4")
    assert f["law"].a_lo_us == pytest.approx(4.736, rel=0.01)
    text = F.to_yaml([f], "h100_sxm", "decodelab fit-hardware allreduce_vllm.csv")
    assert "  all_reduce_by_engine:\n    vllm:\n      tp4:   # allreduce_vllm.csv" in text

    assert float(collectives.collective_time(vllm_tp4, 81920.0)) * 1e6 == pytest.approx(5.116, abs=1e-3)
    cfg = compose_cfg("model=llama3_1_70b", "hardware=dgx_h100", "hardware.tensor_parallel=4")
    ar = next(o for o in build(cfg).ops if o.coll_kind == "all_reduce")
    hw, w = cfg.hardware, cfg.workload
    own = collectives.law_of(ar, Ctx(hw, w.weight_dtype, w.kv_dtype, 4, "vllm"))[0]
    assert (own.a_lo_us, own.beta_gb_s) == (4.736, 215.6)
    for eng in ("trtllm", ""):
        law = collectives.law_of(ar, Ctx(hw, w.weight_dtype, w.kv_dtype, 4, eng))[0]
        assert law.a_lo_us == hw.op_fit.all_reduce.tp4.a_lo_us
    trt = hw.op_fit.all_reduce.tp4
    assert float(collectives.collective_time(trt, 81920.0)) * 1e6 == pytest.approx(4.029, abs=1e-3)
    # the serving engines' all-reduces run their own kernels: at this size vLLM's costs more (its
    # GEMMs pinned to TensorRT-LLM's table here, so that the all-reduce is the only difference)
    ms = {
        e: decodelab_eval(
            "model=qwen3_32b",
            "hardware=dgx_h100",
            "hardware.tensor_parallel=4",
            "workload.batch_size=8",
            f"engine={e}",
            "hardware.op_tables.gemm_by_engine.vllm=",
        )
        for e in ("default", "vllm")
    }
    # TensorRT-LLM's all-reduce on the H100 comes from its measured 1.0.0rc3 table (tests/test_optable.py):
    # 8 tokens x 5120 x 2 B = 81,920 B, log-log between the measured 32,768 and 65,536 elements
    trt_us = collectives.collective_row(hw.op_tables.all_reduce, 4, 10240.0)[list(M_GRID).index(8.0)] * 1e6
    assert 4.1 < trt_us < 4.8
    # vLLM's from its own measured table likewise (op_tables.all_reduce_by_engine; its law, 5.116 us,
    # only where the table has no GPU count)
    vllm_us = collectives.collective_row(hw.op_tables.all_reduce_by_engine.vllm, 4, 10240.0)
    vllm_us = vllm_us[list(M_GRID).index(8.0)] * 1e6
    assert 5.0 < vllm_us < 6.0
    n_ar = 2 * 64
    assert ms["default"] - ms["vllm"] == pytest.approx(n_ar * (trt_us - vllm_us) * 1e-3, rel=0.01)


@pytest.mark.parametrize("chip", ["h200_sxm", "b200_sxm"])
def test_other_chips_have_the_engines_own_all_reduce(chip):
    """H200 and B200 carry vLLM's and SGLang's own all-reduce laws at TP 2/4/8, fitted to their own
    custom_allreduce_perf tables, and those tables (op_tables.all_reduce_by_engine): a vLLM design
    on them costs its all-reduces with its own kernel, from its table."""
    cfg = compose_cfg(
        "model=llama3_1_70b", f"hardware={chip}", "hardware.n_chips=4", "hardware.tensor_parallel=4"
    )
    hw, w = cfg.hardware, cfg.workload
    for fam in ("vllm", "sglang"):
        assert sorted(hw.op_fit.all_reduce_by_engine[fam]) == ["tp2", "tp4", "tp8"]
    ar = next(o for o in build(cfg).ops if o.coll_kind == "all_reduce")
    vllm = Ctx(hw, w.weight_dtype, w.kv_dtype, 4, "vllm")
    own, path = collectives.law_of(ar, vllm)
    assert own.a_lo_us == hw.op_fit.all_reduce_by_engine.vllm.tp4.a_lo_us
    assert collectives.price(ar, vllm).tab is not None
    assert path == hw.op_tables.all_reduce_by_engine.vllm and path.startswith(f"operators/{chip}_")
    trt = collectives.law_of(ar, Ctx(hw, w.weight_dtype, w.kv_dtype, 4, "trtllm"))[0]
    assert trt.a_lo_us == hw.op_fit.all_reduce.tp4.a_lo_us


def decodelab_eval(*overrides):
    from decodelab.modes.dispatch import evaluate

    return evaluate(compose_cfg(*overrides))["metrics"]["tpot_collectives_ms"]


@pytest.mark.parametrize(
    "override, words",
    [
        (
            "hardware.op_fit.all_reduce_by_engine.vllm.x4={a_lo_us:1,a_hi_us:1,s_switch_bytes:1,beta_gb_s:1}",
            "all_reduce_by_engine.vllm.x4",
        ),
        ("hardware.op_fit.all_reduce_by_engine.vllm.tp4.beta_gb_s=0", "beta_gb_s=0.0 must be in (0.0"),
        ("+hardware.op_fit.all_reduce_by_engine.vllm.tp4.extra=1", "needs exactly the fields"),
    ],
)
def test_bad_engine_all_reduce_law_is_one_error_line(override, words):
    r = cli(Path.cwd(), "model=qwen3_32b", "hardware=dgx_h100", override, "tracking=off")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and words in lines[0], r.stderr
