"""MLA prefill attention from the chip's fitted law (hardware.op_fit.mla_prefill and
mla_prefill_by_engine, fitted to AIConfigurator's context_mla_perf tables by tools/aic_mla_prefill.py and
`decodelab fit-hardware`; framework/opcost/attention_prefill.py): the law's columns and one call worked
by hand against the measured rows, the engine's own law, the ops that keep the roofline, the CSV kinds,
the fit recovering a known law, and the kernel against the reference."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import assert_steps_match_reference, compose_cfg
from omegaconf import open_dict
from decodelab.calibration import fit as F
from decodelab.calibration import operators as O
from decodelab.core.build import build
from decodelab.kernel_layout import Law, Lin
from decodelab.opcost import attention_prefill, registry

TP8 = ("hardware.n_chips=8", "hardware.tensor_parallel=8", "workload.weight_dtype=fp8_block")
PAIRS_8K = 8192 * 8193 / 2  # causal (query, key) pairs of one 8,192-token prompt


def _prefill(*ov):
    cfg = compose_cfg("model=deepseek_v3", *TP8, "workload.kv_dtype=fp8", *ov)
    d = build(cfg)
    i = next(j for j, op in enumerate(d.ops) if op.name == "attention_prefill")
    return d, i


def _one_8k_prompt(d, i) -> float:
    """The law's seconds for one 8,192-token prompt from the op's kernel columns."""
    lin = d.op_lin[i]
    return lin[Lin.T0] + lin[Lin.A_PAIR] * PAIRS_8K + lin[Lin.A_TOK] * 8192 + lin[Lin.A_SEQ]


def test_b200_tensorrt_llm_law_by_hand():
    """DeepSeek-V3 at TP8 on a B200 (16 heads per GPU), FP8 cache, TensorRT-LLM: e_a 0.3095, tau_tok
    0.4485 ns, tau_seq 18.34 ns, t0 18.81 us, P = 4,500 TFLOP/s, hd = (192 + 128) / 2 = 160. One
    8,192-token prompt: 16 x 33,558,528 pairs x 640 / (4.5e15 x 0.3095) = 246.73 us, + 16 x 8,192 x
    0.4485 ns = 58.79 us, + 16 x 18.34 ns = 0.29 us, + 18.81 us = 324.6 us a layer; TensorRT-LLM
    1.3.0rc20 measured 316.2 us (+2.7%); the roofline law it replaces gave ~130 us."""
    d, i = _prefill("hardware=b200_sxm", "engine=default")
    assert d.op_lin[i, Lin.LAW] == Law.ATTN
    assert d.op_lin[i, Lin.A_PAIR] == pytest.approx(16 * 640 / (4.5e15 * 0.3095), rel=1e-12)
    assert _one_8k_prompt(d, i) * 1e6 == pytest.approx(324.6, abs=0.1)
    assert _one_8k_prompt(d, i) == pytest.approx(316.2e-6, rel=0.05)


@pytest.mark.parametrize(
    "chip, engine, measured_us",
    [
        ("b200_sxm", "sglang", 346.2),  # SGLang 0.5.9, trtllm_mla
        ("h200_sxm", "sglang", 1837.7),  # SGLang 0.5.9, FlashAttention-3: 2.9x TensorRT-LLM's
        ("h200_sxm", "default", 632.4),  # TensorRT-LLM 1.3.0rc20
        ("h200_sxm", "vllm", 632.4),  # no law of its own: the chip's (TensorRT-LLM's)
    ],
)
def test_each_engine_takes_its_own_law_or_the_chips(chip, engine, measured_us):
    """The measured one-prompt row (8,192 tokens, 16 heads, FP8 cache) within the fit's error."""
    d, i = _prefill(f"hardware={chip}", f"engine={engine}")
    assert _one_8k_prompt(d, i) == pytest.approx(measured_us * 1e-6, rel=0.15)


def test_without_a_law_the_roofline_and_a_note():
    d, i = _prefill("hardware=h200_sxm", "engine=default", "~hardware.op_fit.mla_prefill.fp8")
    assert d.op_lin[i, Lin.LAW] == Law.NONE
    assert any("attention_prefill (no op_fit.mla_prefill.fp8 law)" in n for n in d.notes)


def test_sparse_attention_keeps_the_roofline():
    """DeepSeek-V3.2's prefill attends the index_topk tokens the indexer picks: the dense table does not
    describe it, so its op carries no heads for the law."""
    cfg = compose_cfg("model=deepseek_v3_2", "hardware=h200_sxm", *TP8)
    op = next(op for op in build(cfg).ops if op.name == "attention_prefill")
    assert op.attn_heads == 0 and not attention_prefill.matches(op)


def test_a_bad_key_is_one_error_line():
    hw = compose_cfg("hardware=h200_sxm").hardware
    with open_dict(hw):
        hw.op_fit.mla_prefill_by_engine.sglang["int8"] = hw.op_fit.mla_prefill.fp8
    assert "hardware.op_fit.mla_prefill_by_engine.sglang.int8: the key must be bf16 or fp8" in registry.check(
        hw
    )


def test_csv_kinds(tmp_path):
    """A context MLA CSV is TensorRT-LLM's without a framework column or with it naming TensorRT-LLM,
    an engine's own otherwise."""
    rows = dict(batch_size=[1], isl=[1024], num_heads=[16], mla_dtype=["bfloat16"], kv_cache_dtype=["fp8"])
    rows["latency_ms"] = [0.04]
    for framework, kind in (
        (None, "context_mla"),
        ("trtllm", "context_mla"),
        ("sglang", "context_mla:sglang"),
    ):
        df = pd.DataFrame(rows if framework is None else {"framework": [framework], **rows})
        df.to_csv(tmp_path / "m.csv", index=False)
        assert O.read(tmp_path / "m.csv")[1] == kind


def test_fit_recovers_a_known_law():
    """Rows made by a law (1-128 heads, 1-64 prompts of 16-8,192 tokens, B200 FP8 peak) are fitted back
    to it within 1% in every parameter."""
    hw = compose_cfg("hardware=b200_sxm").hardware
    true = SimpleNamespace(e_a=0.35, tau_tok_ns=0.5, tau_seq_ns=20.0, t0_us=15.0)
    g = np.array(
        [(b, s, h) for b in (1, 4, 16, 64) for s in (16, 256, 1024, 4096, 8192) for h in (2, 16, 128)]
    )
    b, s, h = (g[:, k].astype(float) for k in range(3))
    keep = b * s <= 16384
    b, s, h = b[keep], s[keep], h[keep]
    peak = 4.5e15
    t = attention_prefill.prefill_attention_time(
        true, b * s * (s + 1) / 2, b * s, b, h, F.MLA_PREFILL_HD, peak
    )
    d = pd.DataFrame(dict(batch_size=b, isl=s, num_heads=h, kv_cache_dtype="fp8", t=t))
    law, pred, _ = F.fit_mla_prefill(d, "fp8", hw)
    for field in F.PREFILL_FIELDS:
        assert getattr(law, field) == pytest.approx(getattr(true, field), rel=0.01), field
    assert np.allclose(pred, t, rtol=0.01)


@pytest.mark.parametrize("engine", ["default", "sglang"])
def test_kernel_matches_reference_with_the_mla_prefill_law(engine):
    cfg = compose_cfg("model=deepseek_v3", "hardware=b200_sxm", *TP8, f"engine={engine}")
    assert_steps_match_reference(cfg, 4, 6000, 3, 2)
