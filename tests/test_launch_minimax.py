"""MiniMax-M2.5 on vLLM as InferenceX's scripts launched it at each row's date (framework/data/validation/
aic_mapping.yaml, the inferencex-vllm-minimax-* entries): the v0.19.0 B200 scripts' step budget $((ISL * 2)) and
memory fraction 0.90, the scripts without --kv-cache-dtype running vLLM's `auto` (BF16) KV cache."""

from __future__ import annotations

import pytest
from conftest import inferencex_source, silicon_row
from decodelab.runs import aic_launches
from decodelab.runs.validation_predict import launch_engine, row_engine


def minimax_row(system: str, version: str, precision: str = "fp8", isl: int = 8192):
    source = inferencex_source("MiniMax-M2.5", 16, "2026-04-08T00:00:00Z", f"vllm/vllm-openai:v{version}")
    who = {"backend": "vllm", "backend_version": version, "model_path": "MiniMaxAI/MiniMax-M2.5"}
    return silicon_row(source, system=system, precision=precision, isl=str(isl), **who)


def test_a_row_rule_of_the_stated_isl():
    pairs = (("max_tokens_per_step", {"isl_times": 2}), ("max_batch", "{concurrency}"))
    assert row_engine({"row_engine": pairs, "concurrency": 16, "isl": 1024}) == {
        "max_tokens_per_step": 2048,
        "max_batch": 16,
    }


@pytest.mark.parametrize("precision", ["fp8", "fp4"])
@pytest.mark.parametrize("isl", [1024, 8192])
def test_b200_v0_19_budget_is_twice_the_isl(precision, isl):
    r = {
        "concurrency": 16,
        "isl": isl,
        "dp": 1,
        **aic_launches.launch_of(minimax_row("b200_sxm", "0.19.0", precision, isl)),
    }
    assert launch_engine(r, "vllm", "auto") == {"max_tokens_per_step": 2 * isl, "chunk_size": 2 * isl}
    assert "engine.kv_mem_fraction=0.90" in r["launch_overrides"]


@pytest.mark.parametrize(
    "system, version, bf16_kv",
    [("h200_sxm", "0.16.0", True), ("h200_sxm", "0.18.0", True), ("h100_sxm", "0.18.0", True),
     ("b200_sxm", "0.17.0", True), ("b200_sxm", "0.19.0", False)],
)  # fmt: skip
def test_scripts_without_a_kv_dtype_ran_bf16_kv(system, version, bf16_kv):
    overrides = aic_launches.launch_of(minimax_row(system, version))["launch_overrides"]
    assert ("workload.kv_dtype=bf16" in overrides) == bf16_kv
