"""InferenceX's B300 single-node scripts reuse the B200 recipes as-is (their header notes; the scripts equal the
B200 ones @95f0d9d5a, 435ba1219, 505bc4a5c): a B300 row takes the B200 launch of its engine, model and precision
(aic_mapping.yaml launches), and the B300 / GB200 / GB300 MoE tables hold the kernels those launches name, timed on
each chip (tools/aic_moe_kernel_convert.py BORROWS; framework/data/operators/README.md)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import inferencex_source, silicon_row
from decodelab.paths import PACKAGE_DIR
from decodelab.runs import aic_launches


def row(system, model_path, backend, version, precision, measured="2026-04-20T00:00:00Z"):
    source = inferencex_source(model_path.split("/")[-1], 16, measured, f"image:{version}")
    who = {"backend": backend, "backend_version": version, "model_path": model_path, "tp_size": "8"}
    return silicon_row(source, system=system, precision=precision, isl="1024", **who)


@pytest.mark.parametrize(
    "model_path, backend, version, precision, launch",
    [
        ("deepseek-ai/DeepSeek-R1-0528", "sglang", "0.5.9", "fp8", "inferencex-sglang-dsr1-b200-fp8"),
        ("nvidia/DeepSeek-R1-0528-FP4-V2", "sglang", "0.5.9", "fp4", "inferencex-sglang-dsr1-b200-fp4"),
        ("MiniMaxAI/MiniMax-M2.5", "vllm", "0.19.0", "fp8", "inferencex-vllm-minimax-b200"),
        ("nvidia/MiniMax-M2.5-NVFP4", "vllm", "0.19.0", "fp4", "inferencex-vllm-minimax-b200-fp4"),
        ("openai/gpt-oss-120b", "vllm", "0.15.1", "fp4", "inferencex-vllm-gptoss-b200"),
        ("openai/gpt-oss-120b", "trtllm", "1.3.0rc5", "fp4", "inferencex-trtllm-gptoss-b200"),
    ],
)
def test_a_b300_row_takes_the_b200_launch(model_path, backend, version, precision, launch):
    for system in ("b200_sxm", "b300_sxm"):
        assert (
            aic_launches.launch_of(row(system, model_path, backend, version, precision))["launch"] == launch
        )
    assert (
        aic_launches.launch_of(row("h200_sxm", model_path, backend, version, precision))["launch"] != launch
    )


@pytest.mark.parametrize(
    "table, kernel, dtype, rows",
    [
        ("b300_sxm_moe_sglang_0.5.10", "sglang_flashinfer_trtllm_moe", "fp8_block", 11043),
        ("b300_sxm_moe_sglang_0.5.10", "sglang_flashinfer_trtllm_moe", "nvfp4", 10449),
        ("b300_sxm_moe_trtllm_1.3.0rc10", "sglang_flashinfer_trtllm_moe", "fp8_block", 11043),
        (
            "b300_sxm_moe_vllm_0.19.0",
            "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
            "fp8_block",
            3807,
        ),
        ("gb200_moe_sglang_0.5.9", "sglang_flashinfer_trtllm_moe", "fp8_block", 11042),
        (
            "gb300_moe_vllm_0.14.0",
            "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
            "fp8_block",
            3807,
        ),
    ],
)
def test_the_named_kernels_are_timed_on_each_chip(table, kernel, dtype, rows):
    t = pd.read_parquet(PACKAGE_DIR / "data" / "operators" / f"{table}.parquet")
    assert ((t.kernel_source == kernel) & (t.moe_dtype == dtype)).sum() == rows


@pytest.mark.parametrize(
    "system, precision, launch",
    [
        ("b200_sxm", "fp8", "inferencex-sglang-qwen3.5-blackwell"),
        ("b300_sxm", "fp4", "inferencex-sglang-qwen3.5-blackwell"),
        ("h200_sxm", "fp8", "inferencex-sglang-qwen3.5-h200"),
    ],
)
def test_qwen3_5_rows_keep_their_state_in_bf16(system, precision, launch):
    """InferenceX's Qwen3.5 FP8 / FP4 SGLang scripts pass --mamba-ssm-dtype bfloat16 from their first version."""
    got = aic_launches.launch_of(row(system, "Qwen/Qwen3.5-397B-A17B-FP8", "sglang", "0.5.9", precision))
    assert got["launch"] == launch
    assert "model.linear_state_dtype=bf16" in got["launch_overrides"]


@pytest.mark.parametrize(
    "model_path, system, precision, launch",
    [
        ("zai-org/GLM-5-FP8", "b200_sxm", "fp8", "inferencex-sglang-glm5-fp8-blackwell"),
        ("zai-org/GLM-5-FP8", "b300_sxm", "fp8", "inferencex-sglang-glm5-fp8-blackwell"),
        ("nvidia/GLM-5-NVFP4", "b300_sxm", "fp4", "inferencex-sglang-glm5-fp4-b300"),
        ("nvidia/GLM-5-NVFP4", "b200_sxm", "fp4", ""),
    ],
)
def test_glm5_blackwell_rows_run_the_trtllm_gen_moe(model_path, system, precision, launch):
    """InferenceX's GLM-5 FP8 B200 / B300 and FP4 B300 SGLang scripts pass --moe-runner-backend flashinfer_trtllm
    from their first version; the FP4 B200 script only from 2026-04-09 (not matched)."""
    assert aic_launches.launch_of(row(system, model_path, "sglang", "0.5.9", precision))["launch"] == launch
