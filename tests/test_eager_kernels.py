"""The kernels an eager forward launches (engine.eager_kernels; components/execution/gpu.py eager_kernels):
the host dispatch of a step that replays no CUDA graph is engine.eager_launch_us per kernel launched, and
some of an engine's ops launch several. The rule by hand, TensorRT-LLM's counts for DeepSeek-R1 and
gpt-oss-120b worked out from their op lists, the engine vector's host time, and the checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import compose_cfg
from decodelab.components.execution import gpu
from decodelab.components.ops import Op
from decodelab.core.build import build
from decodelab.errors import ConfigError
from decodelab.modes.serving import engine_vector as EV

TRT = {"attention": 2.0, "attention_prefill": 5.0, "route": 2.0, "moe_block": 2.0, "shared_experts": 5.0}
SERVE = ("workload=closed_loop", "workload.concurrency=4")
B200 = ("hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
R1 = ("model=deepseek_r1", *B200, "workload.weight_dtype=nvfp4", "workload.kv_dtype=fp8")


def _head(share: float, shared: bool) -> Op:
    op = Op("gate_up_proj", "gemm", repeat=61)
    op.moe_block = ("head", 7168, 2048, 8, 256, 1, 8, share, 0.0, 1.5)
    op.shared_expert = shared
    return op


def test_kernels_per_call_by_hand():
    """An op the table names takes its count, any other one kernel. A block's head over 58 of 61 layers
    with a shared expert: 3/61 x 1 + 58/61 x (2 + 5) = 409 / 61 kernels a call; without one 2 on the MoE
    layers; no table: 1."""
    assert gpu.eager_kernels(Op("route", "elementwise"), TRT) == 2.0
    assert gpu.eager_kernels(Op("o_proj", "gemm"), TRT) == 1.0
    assert math.isclose(gpu.eager_kernels(_head(58 / 61, True), TRT), 409 / 61, rel_tol=1e-12)
    assert gpu.eager_kernels(_head(1.0, False), TRT) == 2.0
    assert gpu.eager_kernels(_head(58 / 61, True), {}) == 1.0


def _launched(*overrides: str) -> tuple:
    design = build(compose_cfg(*SERVE, *overrides))
    rep = design.call_rep
    kernels = np.array([c["eager_kernels"] for c in design.calls])
    return float(rep.sum()), float((rep * kernels).sum()), design


def test_deepseek_r1_on_tensorrt_llm():
    """DeepSeek-R1, 8 B200, NVFP4, TensorRT-LLM's file: 1,038 calls a forward (21 a layer's worth:
    embedding, 17 layer calls x 61, route x 58, final norm, LM head, sampling). Launched: + 61 (attention
    2) + 4 x 61 (attention_prefill 5) + 58 (route 2) + (409 - 61) (the block's head with the shared
    expert) = 1,749 (TensorRT-LLM's code count: 1,600-1,800). The engine vector's eager host time:
    1,749 x 35 us = 61.215 ms."""
    calls, launched, design = _launched(*R1)
    assert calls == 1038.0
    assert math.isclose(launched, 1749.0, rel_tol=1e-9)
    cfg = compose_cfg(*SERVE, *R1)
    assert math.isclose(EV.eager_fields(cfg, design)["eager_host"], 1749 * 35e-6, rel_tol=1e-9)


def test_gpt_oss_on_tensorrt_llm():
    """gpt-oss-120b, 8 B200, MXFP4: 400 calls (11 a layer x 36 + 4); launched + 36 (attention) + 36 (route)
    + 36 (the head, no shared expert) = 508 (the code count: 12-19 a layer, ~550)."""
    calls, launched, _ = _launched(
        "model=gpt_oss_120b", *B200, "workload.weight_dtype=mxfp4", "workload.kv_dtype=fp8"
    )
    assert calls == 400.0
    assert math.isclose(launched, 508.0, rel_tol=1e-9)


def test_other_engines_launch_one_kernel_a_call():
    """SGLang's figure is per counted call (its PR #12160 forward), vLLM compiles: no table, one a call."""
    for engine in ("sglang", "vllm"):
        calls, launched, _ = _launched(f"engine={engine}", *R1)
        assert launched == calls


def test_static_eager_decode_launches_per_kernel():
    """Without CUDA graphs a static decode call's host dispatch is eager_launch_us x its kernels."""
    design = build(compose_cfg(*R1, "optimizations.cuda_graphs=false"))
    by_name = {op.name: design.calls[op.call] for op in design.ops}
    assert math.isclose(by_name["attention_prefill"]["launch_async"], 5 * 35e-6, rel_tol=1e-12)
    assert math.isclose(by_name["o_proj"]["launch_async"], 35e-6, rel_tol=1e-12)


def test_bad_counts_are_one_error_line_and_unknown_names_a_note():
    with pytest.raises(ConfigError, match=r"engine.eager_kernels.route=0.0 must be a number >= 1"):
        build(compose_cfg(*SERVE, "engine.eager_kernels.route=0"))
    notes = build(compose_cfg(*SERVE, "+engine.eager_kernels.atention=3")).notes
    assert [n for n in notes if "eager_kernels" in n] == [
        "engine.eager_kernels names atention, which no op of this model has: not used"
    ]
    assert not any("eager_kernels" in n for n in build(compose_cfg(*SERVE)).notes)  # MLA / MoE names: quiet


def test_the_shipped_keys_name_ops_of_the_shipped_models():
    """Every key of the engine files' tables is a role or the name of an op DeepSeek-R1, gpt-oss-120b or
    Llama-3.1-8B builds (a misspelt name would be one kernel silently)."""
    names = set(gpu.EAGER_ROLES)
    for model in ("deepseek_r1", "gpt_oss_120b", "llama3_1_8b"):
        names |= {op.name for op in build(compose_cfg(f"model={model}", *B200)).ops}
    for engine in ("default", "sglang", "vllm", "trtllm_inferencex"):
        table = compose_cfg(f"engine={engine}").engine.eager_kernels
        assert set(table) <= names, engine
