"""vLLM's Marlin W4A16 MoE (engine.moe_backend=marlin; framework/opcost/moe_blocks.py KERNELS, SOLE): InferenceX's
gpt-oss Hopper runs set VLLM_MXFP4_USE_MARLIN=1. The backend reads only its own kernel's rows (INT4 and MXFP4
weights, one family), carried from the nearest of them before any other kernel's exact block; the other backends
never read them (ONLY_NAMED)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core.build import build
from decodelab.core.cost_setup import cost_context
from decodelab.errors import ConfigError
from decodelab.paths import DATA_DIR
from decodelab.opcost import moe as moetable
from decodelab.opcost import moe_blocks

MXFP4_MARLIN, INT4_MARLIN, MXFP4_MARLIN_SM100 = moe_blocks.KERNELS["marlin"]
GPT_OSS = (2880, 2880, 4, 128, 8, 1)  # hidden, expert FFN, top-k, experts, moe_tp, moe_ep
NS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


def _table(tmp_path):
    """Triton at gpt-oss's exact block; Marlin on INT4 at Kimi-K2's (near) and on MXFP4 at Kimi-K3's (far)."""
    blocks = [
        ("w4a16_mxfp4", GPT_OSS, "vllm_fused_moe", 0.040),
        ("int4_wo", (7168, 2048, 8, 384, 8, 1), INT4_MARLIN, 0.041),
        ("w4a16_mxfp4", (3584, 3072, 16, 896, 8, 1), MXFP4_MARLIN, 0.072),
    ]
    rows = [
        dict(moe_dtype=dt, num_tokens=n, hidden_size=s[0], inter_size=s[1], topk=s[2], num_experts=s[3],
             moe_tp_size=s[4], moe_ep_size=s[5], kernel_source=k, latency_ms=t0 * (1 + n / 64))
        for dt, s, k, t0 in blocks
        for n in NS
    ]  # fmt: skip
    path = tmp_path / "moe.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _head(shape):
    return SimpleNamespace(moe_block=("head", *shape))


@pytest.mark.parametrize("backend", ["", "triton"])
def test_other_backends_read_the_exact_triton_block(tmp_path, backend):
    path = _table(tmp_path)
    block, source, _ = moetable.block_of(_head(GPT_OSS), [path], "mxfp4", 4.8e12, 989e12, backend)
    assert source is None
    np.testing.assert_allclose(block, moe_blocks.block_row(path, "mxfp4", GPT_OSS, backend))
    read = set(moe_blocks.kernel_rows(pd.read_parquet(path), backend).kernel_source)
    assert read == {"vllm_fused_moe"}  # the Marlin rows are ONLY_NAMED


def test_marlin_is_carried_from_its_nearest_block_of_either_weight_type(tmp_path):
    """The INT4 block (Kimi-K2's: distance 8.8) is nearer than the MXFP4 one (Kimi-K3's: 10.4); its fixed part
    f (its one-token time beyond ideal) is kept, the rest scaled by ideal(gpt-oss, MXFP4 bytes 0.53125) /
    ideal(Kimi-K2, INT4 bytes 0.5)."""
    path = _table(tmp_path)
    bw, pk = 4.8e12, 989e12
    block, (where, key), _ = moetable.block_of(_head(GPT_OSS), [path], "mxfp4", bw, pk, "marlin")
    assert where == path and key == ("int4_wo", 7168, 2048, 8, 384, 8, 1)
    src = moe_blocks.block_row(path, "int4_wo", key[1:], "marlin")
    have = moe_blocks.ideal("int4_wo", key[1:], bw, pk)
    want = moe_blocks.ideal("w4a16_mxfp4", GPT_OSS, bw, pk)
    f = src[0] - have[0]
    assert (
        abs(f - (41e-6 * (1 + 1 / 64) - 8 * 3 * 7168 * 256 * 0.5 / bw)) < 1e-10
    )  # 8 experts' INT4 at 1 token
    np.testing.assert_allclose(block, f + (src - f) * want / have, rtol=1e-12)


def test_marlin_reads_only_the_tables_that_time_it(tmp_path):
    """The chip's table (here one with Triton's exact block only) is not read while the engine's times Marlin."""
    path = _table(tmp_path)
    triton_only = tmp_path / "triton.parquet"
    df = pd.read_parquet(path)
    df[df.kernel_source == "vllm_fused_moe"].to_parquet(triton_only)
    _, source, _ = moetable.block_of(
        _head(GPT_OSS), [path, str(triton_only)], "mxfp4", 4.8e12, 989e12, "marlin"
    )
    assert source[1][0] == "int4_wo"
    _, source, _ = moetable.block_of(_head(GPT_OSS), [str(triton_only)], "mxfp4", 4.8e12, 989e12, "marlin")
    assert source is None  # no table times Marlin: the exact Triton block, as before


def test_gpt_oss_on_h200_under_marlin_names_the_block_it_came_from():
    o = (
        "hardware.n_chips=8",
        "hardware.tensor_parallel=8",
        "workload.weight_dtype=mxfp4",
        "engine.moe_backend=marlin",
    )
    d = build(compose_cfg("hardware=h200_sxm", "model=gpt_oss_120b", "engine=vllm", *o))
    assert any(
        "MoE block carried from the nearest one measured (int4_wo, hidden 7168, expert FFN 2048, top-8 of 384"
        in n
        for n in d.notes
    )


@pytest.mark.parametrize(
    "system, version, launched",
    [
        ("h100_sxm", "0.18.0", True),
        ("h200_sxm", "0.18.0", True),
        ("h200_sxm", "", False),
        ("b200_sxm", "0.18.0", False),
    ],
)
def test_inferencex_gpt_oss_vllm_hopper_rows_run_marlin(system, version, launched):
    """VLLM_MXFP4_USE_MARLIN=1 in InferenceX's gptoss_fp4_h{100,200}.sh from PR #327 (2026-01-02): the 0.18.0 rows,
    not the version-less ones of 2025-11-02 (v0.10.2)."""
    from conftest import inferencex_source, silicon_row
    from decodelab.runs import aic_launches

    source = inferencex_source("GPT-OSS-120B", 16, "2026-03-25T00:00:00Z", "vllm/vllm-openai:v0.18.0")
    who = {
        "backend": "vllm",
        "backend_version": version,
        "model_path": "openai/gpt-oss-120b",
        "system": system,
    }
    row = silicon_row(source, **who)
    assert ("engine.moe_backend=marlin" in aic_launches.launch_of(row)["launch_overrides"]) == launched


@pytest.mark.parametrize("chip, kernel", [("b300_sxm", "MXFP4_MARLIN_SM100"), ("gb300", "MXFP4_MARLIN")])
def test_kimi_k3_on_vllm_reads_its_measured_marlin_block(chip, kernel):
    """Kimi-K3's compressed-tensors MXFP4 experts run vLLM's Marlin MoE (model.moe_backend_by_engine {vllm: marlin}),
    weight-only (w4a16) even on an FP4 chip; the chip's vLLM table holds K3's block as vLLM 0.24.0 timed it (hidden
    3,584, expert FFN 3,072, top-16 of 896, moe_tp 8): no block is carried."""
    cfg = compose_cfg(
        "model=kimi_k3", f"hardware={chip}", "hardware.n_chips=8", "hardware.tensor_parallel=8",
        "engine=vllm_0_19", "workload.weight_dtype=mxfp4",
    )  # fmt: skip
    ctx = cost_context(cfg)
    assert (ctx.moe_backend, ctx.moe_mxfp4) == ("marlin", "w4a16")
    path = cfg.hardware.op_tables.moe_by_engine.vllm
    assert moe_blocks.times_kernel(path, "mxfp4", "marlin")
    raw = pd.read_parquet(DATA_DIR / path)
    raw = raw[(raw.num_experts == 896) & (raw.moe_tp_size == 8) & (raw.moe_ep_size == 1)]
    assert set(raw.kernel_source) == {globals()[kernel]}
    row = moe_blocks.block_row(path, "mxfp4", (3584, 3072, 16, 896, 8, 1), "marlin")
    assert row is not None
    assert not any("carried" in n for n in build(cfg).notes)
    # another engine family keeps its own backend
    assert cost_context(compose_cfg("model=kimi_k3", "engine=sglang_0_5_8")).moe_backend != "marlin"


def test_a_bad_model_moe_backend_is_one_error_line():
    cfg = compose_cfg("model=kimi_k3", "engine=vllm_0_19", "model.moe_backend_by_engine.vllm=fast")
    with pytest.raises(
        ConfigError, match=r"^model.moe_backend_by_engine.vllm='fast' is not one of: trtllm, "
    ):
        cost_context(cfg)
