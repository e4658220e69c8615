"""Each layer's residual add + RMSNorm inside its tensor-parallel all-reduce (issue 39): where the model's
engine code always fuses them (model.allreduce_norm_engines: TensorRT-LLM's DeepseekV3DecoderLayer,
conf/model/deepseek_*.yaml) and where the launch turns the fused kernel on (engine.allreduce_norm: SGLang
--enable-flashinfer-allreduce-fusion, in the aggregated launches and, per pool, in every B200 SGLang recipe of
aic_mapping.yaml disagg_recipes.allreduce_norm; vLLM's fuse_allreduce_rms pass in InferenceX's gpt-oss B200
scripts). Worked by hand on the design's op list."""

from __future__ import annotations

import pytest
from conftest import compose_cfg, inferencex_source, silicon_row
from decodelab.core.build import build
from decodelab.runs import aic_launches, aic_recipes
from decodelab.runs.validation_disagg import pool_settings
from test_disagg_recipes import FP4, row
from test_fp8_block_gemm_kernel import recipe
from test_validation_aic import frame

DSR1 = ("model=deepseek_r1", "hardware=b200_sxm", "workload.weight_dtype=fp8_block")
NORMS = {"input_norm", "residual_norm"}
FLAG = "engine.allreduce_norm=true"


def _names(*o):
    return {op.name for op in build(compose_cfg(*DSR1, *o)).ops}


@pytest.mark.parametrize("model", ["deepseek_r1", "deepseek_v3", "deepseek_v3_1"])
def test_tensor_parallel_trtllm_deepseek_has_no_norm_kernels_of_its_own(model):
    """TP8 under TensorRT-LLM (engine=default): PRE_MOE_FUSION / POST_MOE_FUSION carry both norms in the
    layer's all-reduces."""
    names = _names(f"model={model}", "engine=default", "hardware.n_chips=8", "hardware.tensor_parallel=8")
    assert not NORMS & names
    assert {"attn_allreduce", "mlp_allreduce"} <= names


@pytest.mark.parametrize(
    "o",
    [
        ("engine=default", "model.n_layers=4"),  # TP1 (four layers fit one chip): no all-reduce to ride in
        ("engine=default", "hardware.n_chips=8", "hardware.tensor_parallel=8", "hardware.attention_dp=8"),
        ("engine=sglang_0_5_8", "hardware.n_chips=8", "hardware.tensor_parallel=8"),  # no flag
        ("engine=vllm", "hardware.n_chips=8", "hardware.tensor_parallel=8"),
    ],
)
def test_the_norms_stay_kernels_elsewhere(o):
    """TP1, attention DP (enable_fusion &= not enable_attention_dp) and the other engines' own code."""
    assert NORMS <= _names(*o)


def test_the_launch_flag_fuses_under_any_engine_but_not_with_attention_dp():
    tp8 = (
        "engine=sglang_0_5_8",
        "hardware.n_chips=8",
        "hardware.tensor_parallel=8",
        "engine.allreduce_norm=true",
    )
    assert not NORMS & _names(*tp8)
    assert NORMS <= _names(*tp8, "hardware.attention_dp=8")


@pytest.mark.parametrize(
    "path, dp_attn, pools",
    [
        ("recipes/b200-fp8/1k1k/stp/low-latency-tep8-1p1d.yaml", False, ("prefill", "decode")),
        ("recipes/b200-fp8/8k1k/mtp/max-tpt-dep8-1p1d.yaml", True, ("prefill", "decode")),
        ("recipes/b200-fp8/8k1k_stp_lowlat_2.yaml", False, ("prefill", "decode")),
        ("recipes/b200-fp4/1k1k/mtp/low-latency-dep4-1p-tep8-5d.yaml", False, ("prefill", "decode")),
        ("recipes/gb200-fp8/1k1k/low-latency-mtp.yaml", False, ("prefill",)),
        ("recipes/h200/1k1k/low-latency-1p9d.yaml", False, ()),
        ("recipes/trtllm/b200-fp8/1k1k/stp/ctx1_gen3_tp8_batch1024_eplb0_mtp0_4.yaml", False, ()),
    ],
)
def test_each_recipe_states_its_pools_fusion(path, dp_attn, pools):
    """`enable-flashinfer-allreduce-fusion: true` in both pools of every B200 SGLang file (qiching/srt-slurm
    @5063eb43 and @4a22a181), the prefill pool of the GB200 FP8 1k/1k low-latency MTP file; none on Hopper;
    TensorRT-LLM's recipes are not SGLang's (their model code fuses)."""
    got = aic_recipes.pool_backends([recipe(path, dp_attn)])
    stated = {k for k in got if k.endswith("_allreduce_norm")}
    assert stated == {f"{s}_allreduce_norm" for s in pools}
    assert all(got[f"{s}_allreduce_norm"] == "flashinfer" for s in pools)


def test_a_b200_sglang_row_runs_both_pools_fused(tmp_path):
    """B200 SGLang FP4 8k/1k at 16 clients (low-latency-tp4-1p-tp8-1d.yaml): both pools' engines carry
    engine.allreduce_norm."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    r = frame(tmp_path, row(16, t="2026-02-11T01:17:05Z", isl=8192, engine=sg)).iloc[0]
    got = pool_settings(r, "sglang", aic=True)
    assert got["disagg.prefill.engine"]["allreduce_norm"] is True
    assert got["disagg.decode.engine"]["allreduce_norm"] is True


def gptoss_vllm_row(version: str, measured: str):
    source = inferencex_source("gpt-oss-120b", 4, measured, f"vllm/vllm-openai:v{version or '0.10.2'}")
    who = {"backend": "vllm", "backend_version": version, "model_path": "openai/gpt-oss-120b"}
    return silicon_row(source, precision="fp4", tp_size=8, **who)


def test_vllm_gptoss_b200_scripts_fuse_from_2026():
    """gptoss_fp4_b200 scripts pass pass_config {fuse_allreduce_rms: true} from 2026-01-02 (#327): the 0.15.1
    rows' launch fuses; the 2025 rows' (no version, v0.10.2 image) does not."""
    new = aic_launches.launch_of(gptoss_vllm_row("0.15.1", "2026-02-25T10:00:00Z"))
    old = aic_launches.launch_of(gptoss_vllm_row("", "2025-11-02T10:00:00Z"))
    assert new["launch"] == "inferencex-vllm-gptoss-b200" and FLAG in new["launch_overrides"]
    assert old["launch"] == "inferencex-vllm-gptoss-b200-v0-10" and FLAG not in old["launch_overrides"]
