"""Each disaggregated pool's MoE backend from the InferenceX recipe it ran (aic_mapping.yaml
`disagg_recipes.moe_backend`, framework/runs/aic_recipes.py pool_backends / recorded_settings) and
its engine fields (validation_disagg.pool_settings): rows by hand."""

import math

from decodelab.runs.validation_disagg import pool_settings
from test_disagg_recipes import FP4, row
from test_validation_aic import frame

DUMP = (
    "db-dump/2026-04-27; config_id=1; silicon_concurrency={c}; measured={t}; workflow_run_id=1; "
    "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post{post}"
)
FP8 = (
    FP4.replace("0.8.1.post1", "0.8.1.post2")
    .replace("fp4,disagg", "fp8,disagg")
    .replace("nvfp4,nvfp4", "fp8,fp8")
)
# prefill 1 worker, attention DP 4, experts 1 x 4, batch 1; decode 5 workers of tp 8, experts 1 x 8, batch 2
# (POOL_KEYS order per side: batch, workers, tp, pp, attention DP, moe_tp, moe_ep)
TEP8_X5 = "1,1,1,1,4,1,4,2,5,8,1,1,1,8"


def dumped(c, t, pools, engine=FP4, isl=1024, post=1):
    src = DUMP.format(c=c, t=t, post=post)
    return f"d,{src},{engine.format(isl=isl)},{pools},1000.0,20.0\n"


def backends(r):
    return [r.get(f"{s}_moe_backend") for s in ("prefill", "decode")]


def test_a_recipe_states_each_pools_backend(tmp_path):
    """B200 TensorRT-LLM FP4 1k/1k (PR #588's recipes): 4096 clients ran ctx1_gen1_dep8_batch512 (decode
    with attention DP): prefill TRTLLM, decode CUTLASS; 450 clients ctx1_gen6_tep8_batch64 (decode with
    attention TP): TRTLLM in both pools (the b200-fp4 files' moe_config.backend)."""
    df = frame(tmp_path, row(4096), row(450))
    assert backends(df.iloc[0]) == ["trtllm", "cutlass"]
    assert backends(df.iloc[1]) == ["trtllm", "trtllm"]


def test_a_recorded_row_takes_its_recipes_without_mtp(tmp_path):
    """A db-dump row of 10 clients (1k/1k, B200 FP4, the day PR #588 merged) records 5 decode workers
    of tp 8 at batch 2: the MTP and non-MTP ctx1_gen5_tep8_batch32 files both list 10 clients on these
    pools; the row runs without MTP, so the non-MTP file's backends: TRTLLM in both pools. The same row
    with 4 decode workers matches no recipe: no backend (the engine file's)."""
    t = "2026-01-29T00:00:00.000Z"
    df = frame(tmp_path, dumped(10, t, TEP8_X5), dumped(8, t, TEP8_X5.replace(",2,5,8,", ",2,4,8,")))
    assert backends(df.iloc[0]) == ["trtllm", "trtllm"]
    assert df.iloc[0]["recipe"] == "recipes/trtllm/b200-fp4/1k1k/stp/ctx1_gen5_tep8_batch32_eplb0_mtp0.yaml"
    assert all(not isinstance(v, str) for v in backends(df.iloc[1]))
    # the prefill step of the recipe directory (prefill_step: 10240 tokens, 8 prompts per rank), not the
    # dump's fill-in batch 1, which the row that matches no recipe keeps
    assert [df.iloc[0]["prefill_batch"], df.iloc[0]["prefill_tokens"]] == [8, 10240]
    assert df.iloc[1]["prefill_batch"] == 1


def test_b200_fp8_8k_states_the_decode_pool_only(tmp_path):
    """B200 FP8 8k/1k, 32 clients, 4 decode workers of tp 8 (experts 8 x 1) at batch 8 (ctx1_gen4_tp8_batch32_eplb0_mtp0_32,
    measured 2026-02-12): decode TRTLLM; the fork's 8k/1k files give the prefill ep 1 where the runs had ep 8,
    so their prefill backend is not stated (the engine file's)."""
    pools = "1,1,1,1,8,1,8,8,4,8,1,1,8,1"
    r = frame(tmp_path, dumped(32, "2026-02-12T00:00:00.000Z", pools, engine=FP8, isl=8192, post=2)).iloc[0]
    assert r["refuse"] == ""
    assert backends(r)[0] is None and r["decode_moe_backend"] == "trtllm"


def test_pool_settings_give_the_backend_for_every_weight_dtype_and_mapping():
    """A pool with a stated backend gets it as engine.moe_backend, moe_backend_attention_dp and
    moe_backend_fp8_block (one per pool); a pool without keeps the engine file's (no such keys)."""
    r = {"prefill_batch": 8, "decode_batch": 2, "isl": 1024, "decode_moe_backend": "trtllm"}
    r["prefill_moe_backend"] = math.nan  # a frame's empty cell
    got = pool_settings(r, "trtllm", aic=True)
    dec, pre = got["disagg.decode.engine"], got["disagg.prefill.engine"]
    assert [dec[k] for k in ("moe_backend", "moe_backend_attention_dp", "moe_backend_fp8_block")] == [
        "trtllm"
    ] * 3
    assert not any(k.startswith("moe_backend") for k in pre)
