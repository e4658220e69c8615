"""The KV pool less the engine's start-up profile (framework/core/profile_reserve.py,
engine.profile_reserve): hand-worked reserves of vLLM 0.12's profile_run and TensorRT-LLM's
KvCacheCreator, the pool each basis gives, and what leaves it alone."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.components.placement import GIB
from decodelab.core import profile_reserve as PR
from decodelab.core.build import build
from decodelab.core.kv_pool import kv_pool_bytes
from decodelab.core.schema import memory_tiers

QWEN_TP2 = ("model=qwen3_32b", "hardware.n_chips=2", "hardware.tensor_parallel=2", "workload=closed_loop")


def _reserve(*overrides) -> float:
    cfg = compose_cfg(*overrides)
    return PR.reserve_bytes(cfg, build(cfg).ops, 2.0)


def test_vllm_default_launch_reserve_by_hand():
    """vLLM 0.12 on its defaults (max_num_batched_tokens 8192, max_num_seqs 1024), Qwen3-32B at TP2
    (d_model 5120, SwiGLU intermediate 25600 / 2 = 12800 per chip, vocabulary 151936, BF16):
    forward peak 8192 x (3 x 12800 x 2 B for the SiLU-and-mul op + 5120 x 2 B residual)
    = 713,031,680 B; sampler 8192 x 5120 x 2 B hidden states + 1024 rows x 151936 x 28 B
    = 83,886,080 + 4,356,308,992 = 4,440,195,072 B: the sampler's is the peak (4.14 GiB)."""
    cfg = compose_cfg(*QWEN_TP2, "engine=vllm")
    ops = build(cfg).ops
    assert PR.forward_peak_bytes(ops, 8192, 5120, 2.0) == 713_031_680
    assert PR.sampler_peak_bytes(1024, 151936, 28) == 4_356_308_992
    assert PR.reserve_bytes(cfg, ops, 2.0) == 4_440_195_072


def test_vllm_0_19_triton_sampler_reserve_by_hand():
    """vLLM 0.17-0.19 top-k / top-p in place from 8 rows up (14 bytes per entry): the same Qwen3-32B
    TP2 defaults hold 83,886,080 + 1024 x 151936 x 14 = 83,886,080 + 2,178,154,496 B."""
    assert _reserve(*QWEN_TP2, "engine=vllm_0_19") == 2_262_040_576


def test_vllm_aiconfigurator_launch_reserve_by_hand():
    """The same model as AIConfigurator launches it for 128 clients at isl 4096 (max_num_seqs 128,
    max_num_batched_tokens 128 + 4096 + 1500 = 5724): forward 5724 x 87,040 B = 498,216,960 B,
    sampler 5724 x 10,240 + 128 x 151936 x 28 = 58,613,760 + 544,538,624 = 603,152,384 B."""
    r = _reserve(*QWEN_TP2, "engine=vllm", "engine.max_batch=128", "engine.max_tokens_per_step=5724")
    assert r == 603_152_384


def test_tensorrt_llm_reserve_is_the_forward_by_hand():
    """TensorRT-LLM (no sampler term): Qwen3-32B at TP1, 8192 tokens: 8192 x (3 x 25600 x 2 +
    5120 x 2) = 1,342,177,280 B (1.25 GiB); at TP2 8192 x 87,040 = 713,031,680 B."""
    one = ("model=qwen3_32b", "workload=closed_loop", "engine=default")
    assert _reserve(*one) == 1_342_177_280
    assert _reserve(*QWEN_TP2, "engine=default") == 713_031_680


def test_pool_of_each_basis_less_the_reserve():
    """vLLM (total basis): 0.9 x HBM - weights - reserve; TensorRT-LLM (free basis): 0.8 x (HBM -
    weights - reserve); SGLang's reserve basis and an engine with the profile off: unchanged."""
    w, r = 30 * GIB, 2 * GIB
    for engine, expect in (
        ("vllm", 0.9 * 79.22 * GIB - w - r),
        ("default", 0.8 * (79.22 * GIB - w - r)),
    ):
        cfg = compose_cfg(*QWEN_TP2, f"engine={engine}")
        tiers = memory_tiers(cfg.hardware)
        assert kv_pool_bytes(cfg, tiers, w, r) == pytest.approx(expect, rel=1e-12)
        assert kv_pool_bytes(cfg, tiers, w) - kv_pool_bytes(cfg, tiers, w, r) > 0
    cfg = compose_cfg(*QWEN_TP2, "engine=sglang")
    tiers = memory_tiers(cfg.hardware)
    assert kv_pool_bytes(cfg, tiers, w, r) == kv_pool_bytes(cfg, tiers, w)
    assert _reserve(*QWEN_TP2, "engine=sglang") == 0.0
    assert _reserve(*QWEN_TP2, "engine=sglang", "engine.profile_reserve=true") == 0.0  # its own reserve
    assert _reserve(*QWEN_TP2, "engine=vllm", "engine.profile_reserve=false") == 0.0


def test_design_pool_and_note():
    """A built vLLM design's pool is the profile-free pool less the reserve, and says so."""
    on = build(compose_cfg(*QWEN_TP2, "engine=vllm"))
    off = build(compose_cfg(*QWEN_TP2, "engine=vllm", "engine.profile_reserve=false"))
    gap = off.memory["kv_pool_bytes"] - on.memory["kv_pool_bytes"]
    assert gap == pytest.approx(4_440_195_072, rel=1e-9)
    assert any("4.14 GiB per chip kept for the engine's start-up profile" in n for n in on.notes)
    assert not any("start-up profile" in n for n in off.notes)


def test_pipeline_stages_only_the_last_samples():
    """vLLM under pipeline parallelism (PP2, TP1): profile_run samples on the last rank only, so the
    first stage keeps the forward's 8192 x (3 x 25600 x 2 + 5120 x 2) = 1,342,177,280 B and the last
    also the sampler's 8192 x 10,240 + 1024 x 151936 x 28 B; the pool is the stage that holds the
    fewest tokens, here the last (it also holds the LM head)."""
    from decodelab.core import parallel

    o = (
        "model=qwen3_32b",
        "workload=closed_loop",
        "engine=vllm",
        "hardware.n_chips=2",
        "hardware.tensor_parallel=1",
        "hardware.pipeline_parallel=2",
    )
    cfg = compose_cfg(*o)
    d = build(cfg)
    assert PR.reserve_bytes(cfg, d.ops, 2.0, samples=False) == 1_342_177_280
    assert PR.reserve_bytes(cfg, d.ops, 2.0) == 83_886_080 + 4_356_308_992
    loads = parallel.stage_loads(cfg, d.ops, 151936 * 5120 * 2.0, False)
    tiers = memory_tiers(cfg.hardware)
    last = kv_pool_bytes(cfg, tiers, loads[-1][0], 83_886_080 + 4_356_308_992)
    assert d.memory["kv_pool_bytes"] == pytest.approx(last, rel=1e-12)
