"""The per-shape operator laws of core/oplaw.py in their natural form (seconds of one call), used
by the pure-Python reference (core/reference.py) and the fit (decodelab.calibration); the kernel
evaluates the same laws reduced to per-op constants (oplaw.law_columns)."""

from __future__ import annotations

import numpy as np


def pnorm(a, b, p):
    """(a^p + b^p)^(1/p), computed without overflow (0 when both are 0)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, hi * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def gemm_time(law, m, n, k, peak: float, bw: float, wb: float, ab: float):
    """Seconds of one GEMM of m tokens through an n x k weight."""
    m, n, k = (np.asarray(x, float) for x in (m, n, k))
    tc = 2.0 * n * (k + law.k0) * m / (peak * law.e_c)
    tm = (n * k * wb + m * (k * ab + 2.0 * n)) / (bw * law.e_b)
    return pnorm(tc, tm, law.p) + law.t0_us * 1e-6


def prefill_attention_time(law, pairs, tokens, seqs, heads, head_dim, peak: float):
    """Seconds of one prefill attention call over `seqs` sequences with `tokens` query tokens
    and `pairs` causal (query, key) pairs in total; `heads` query heads (per chip)."""
    pairs, tokens, seqs = (np.asarray(x, float) for x in (pairs, tokens, seqs))
    per_pair = 4.0 * head_dim / (peak * law.e_a)
    return law.t0_us * 1e-6 + heads * (
        pairs * per_pair + tokens * law.tau_tok_ns * 1e-9 + seqs * law.tau_seq_ns * 1e-9
    )


def decode_attention_time(law, seqs, kv_tokens, kv_heads, head_dim, kv_bytes: float):
    """Seconds of one decode attention call: `seqs` sequences reading `kv_tokens` KV tokens in
    total, `kv_heads` KV heads of `head_dim` (per chip)."""
    seqs, kv_tokens = np.asarray(seqs, float), np.asarray(kv_tokens, float)
    b_kv = kv_tokens * 2.0 * kv_heads * head_dim * kv_bytes
    x = law.c_sk_ns * 1e-9 * seqs * kv_heads
    return law.t0_us * 1e-6 + pnorm(x, b_kv / (law.bw_kv_tbs * 1e12), law.p)


def collective_time(law, s_bytes):
    """Seconds of one collective moving a per-rank tensor of `s_bytes` bytes."""
    s = np.asarray(s_bytes, float)
    return np.where(s < law.s_switch_bytes, law.a_lo_us, law.a_hi_us) * 1e-6 + s / (law.beta_gb_s * 1e9)
