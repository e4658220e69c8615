"""The KV cache SGLang's disaggregated Hopper recipes ran (aic_mapping.yaml `disagg_recipes.kv_dtype`,
framework/runs/aic_recipes.py kv_of): BF16 (flashinfer, no --kv-cache-dtype: SGLang's `auto`), not the
FP8 the rows' fp8 precision gives; the B200 recipes and other backends keep the precision's."""

from __future__ import annotations

import pandas as pd
from decodelab.runs import aic_recipes
from decodelab.runs.validation import base_overrides
from test_disagg_recipes import FP4, row
from test_validation_aic import frame


def cells(backend: str, system: str) -> pd.Series:
    return pd.Series(
        {"backend": backend, "system": system, "backend_version": "0.5.8.post1", "mode": "disagg"}
    )


def test_sglang_on_hopper_ran_a_bf16_cache():
    assert aic_recipes.kv_of(cells("sglang", "h200_sxm")) == {"kv_dtype": "bf16"}
    assert aic_recipes.kv_of(cells("sglang", "h100_sxm")) == {"kv_dtype": "bf16"}
    assert aic_recipes.kv_of(cells("sglang", "b200_sxm")) == {}  # recipes' own dtype: the precision's
    assert aic_recipes.kv_of(cells("trtllm", "h200_sxm")) == {}


def test_the_row_kv_dtype_replaces_the_precisions_in_the_design_key():
    """An fp8 DeepSeek row: FP8 KV by its precision; BF16 where its launch ran BF16 (a design key of
    its own, so the pool is sized for BF16 latents)."""
    r = {
        "model": "deepseek-ai/DeepSeek-R1",
        "engine": "sglang",
        "engine_version": "0.5.9",
        "precision": "fp8",
    }
    r.update(system="h200_sxm", tp=8)
    assert "workload.kv_dtype=fp8" in base_overrides(r)
    key = base_overrides({**r, "kv_dtype": "bf16"})
    assert "workload.kv_dtype=bf16" in key and "workload.kv_dtype=fp8" not in key
    assert "workload.kv_dtype=fp8" in base_overrides({**r, "kv_dtype": float("nan")})  # empty cell


def test_a_b200_recipe_row_keeps_its_precisions_cache(tmp_path):
    """B200 SGLang FP4 1k/1k, 32 clients, low-latency-dep4-1p-tep8-6d (test_disagg_recipes): no
    kv_dtype column value, so its precision's FP8."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    r = frame(tmp_path, row(32, t="2026-02-11T01:17:05Z", engine=sg)).iloc[0]
    assert r["refuse"] == ""
    assert not isinstance(r.get("kv_dtype"), str)
