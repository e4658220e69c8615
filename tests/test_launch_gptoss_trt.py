"""The gpt-oss-120b TensorRT-LLM B200 rows of the dev CSV run with InferenceX's FP8 KV cache
(framework/data/validation/aic_mapping.yaml `inferencex-trtllm-gptoss-b200`)."""

from __future__ import annotations

import pandas as pd
from conftest import inferencex_source, silicon_row
from decodelab.runs import aic_launches
from decodelab.runs.validation import base_overrides
from decodelab.runs.validation_predict import launch_engine, row_launch


def gptoss_row(**cells) -> pd.Series:
    image = "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc2.post2"
    source = inferencex_source("GPT-OSS-120B", 256, "2026-02-05T23:18:58Z", image)
    who = {"backend": "trtllm", "backend_version": "1.2.0rc2.post2", "model_path": "openai/gpt-oss-120b"}
    return silicon_row(source, **{**who, **cells})


def test_every_b200_version_runs_the_fp8_kv_launch():
    for version in ("", "1.2.0rc2", "1.2.0rc2.post2"):
        got = aic_launches.launch_of(gptoss_row(backend_version=version))
        assert got["launch"] == "inferencex-trtllm-gptoss-b200"
        assert got["launch_overrides"][0] == "workload.kv_dtype=fp8"
    h200 = aic_launches.launch_of(gptoss_row(system="h200_sxm", backend_version="gpt-oss-dev"))
    # gptoss_fp4_h200_trt_slurm.sh: dtype auto (BF16)
    assert not any(o.startswith("workload.kv_dtype") for o in h200["launch_overrides"])


def test_the_script_budget_and_batch():
    """MAX_NUM_TOKENS=20000, --max_batch_size 512, free_gpu_memory_fraction 0.85: design overrides
    (the KV pool is sized from them), nothing per row."""
    row = {"concurrency": 256, "isl": 1024, "dp": 1, **aic_launches.launch_of(gptoss_row())}
    assert row_launch(row, "trtllm", "auto") == "inferencex-trtllm-gptoss-b200"
    assert launch_engine(row, "trtllm", "auto") == {}
    assert {"engine.kv_mem_fraction=0.85", "engine.max_tokens_per_step=20000", "engine.max_batch=512"} <= set(
        row["launch_overrides"]
    )


def test_the_kv_dtype_is_in_the_design_key():
    row = {
        "model": "openai/gpt-oss-120b",
        "engine": "trtllm",
        "engine_version": "1.2.0rc2.post2",
        "system": "b200_sxm",
        "precision": "mxfp4",
        "tp": 1,
        **aic_launches.launch_of(gptoss_row()),
    }
    key = base_overrides(row)
    kv = [o for o in key if o.startswith("workload.kv_dtype=")]
    assert kv[-1] == "workload.kv_dtype=fp8"  # the launch's, after the precision's bf16 (last wins)
    plain = base_overrides({**row, "launch_overrides": ()})
    assert tuple(key) != tuple(plain)  # so a BF16-KV design is never reused for these rows
