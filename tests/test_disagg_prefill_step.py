"""A recipe-mapped disaggregated row's prefill step: the tokens and prompts one prefill step of one
attention rank carries, as the srt-slurm recipe file states them (aic_mapping.yaml `disagg_recipes`
`prefill_step`, aic_recipes.prefill_step), in place of AIConfigurator's launch rule (isl + 1500)."""

from decodelab.runs.validation_disagg import pool_settings
from test_disagg_moe_backend import dumped
from test_disagg_recipes import FP4, row
from test_validation_aic import frame


def test_trtllm_prefill_step_from_the_recipe_file(tmp_path):
    """B200 TensorRT-LLM FP4 1k/1k at 4096 clients runs ctx1_gen1_dep8_batch512_eplb0_mtp0.yaml, whose
    prefill section states max_num_tokens 10240 and max_batch_size 8 (per attention-DP rank): the
    prefill pool's cap is 8 prompts and its step budget 10240 tokens (the launch rule gave
    1024 + 1500 = 2524, two prompts); overlap stays off (the file's disable_overlap_scheduler true);
    the MoE backends its directory states: TRTLLM in the prefill pool, CUTLASS in the attention-DP
    decode pool (tests/test_disagg_moe_backend.py)."""
    r = frame(tmp_path, row(4096)).iloc[0]
    assert r["refuse"] == "" and r["prefill_tokens"] == 10240 and r["prefill_batch"] == 8
    got = pool_settings(r, "trtllm", aic=True)
    assert got["disagg.prefill.max_batch"] == 8

    def moe(b):
        return {f"moe_backend{x}": b for x in ("", "_attention_dp", "_fp8_block")}

    free = {"kv_mem_basis": "free"}  # the file's free_gpu_memory_fraction (aic_mapping.yaml mem_fraction)
    want = {"overlap": False, "max_tokens_per_step": 10240, **moe("trtllm"), **free, "kv_mem_fraction": 0.75}
    assert got["disagg.prefill.engine"] == want
    assert got["disagg.decode.engine"] == {
        "max_tokens_per_step": 512,
        **moe("cutlass"),
        **free,
        "kv_mem_fraction": 0.8,
    }


def test_unread_directory_keeps_the_launch_rule(tmp_path):
    """B200 SGLang FP4 8k/1k at 16 clients (low-latency-tp4-1p-tp8-1d.yaml, a directory whose prefill
    settings are not stated): prefill budget 8192 + 1500 = 9692, batch cap the engine's (0)."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    r = frame(tmp_path, row(16, t="2026-02-11T01:17:05Z", isl=8192, engine=sg)).iloc[0]
    assert r["refuse"] == "" and r["prefill_tokens"] == 0 and r["prefill_batch"] == 0
    got = pool_settings(r, "sglang", aic=True)
    assert got["disagg.prefill.engine"]["max_tokens_per_step"] == 9692


def test_b200_fp4_8k_prefill_step_and_the_files_decode_batch(tmp_path):
    """B200 TensorRT-LLM FP4 8k/1k at 100 clients runs ctx1_gen5_tep8_batch8_eplb0_mtp0.yaml: prefill
    max_num_tokens 16896, max_batch_size 2 (two 8192-token prompts a step; the launch rule's 9692 held
    one); decode max_batch_size 16 although the name says batch8 (`decode_batch`): 5 workers x 16."""
    r = frame(tmp_path, row(100, isl=8192)).iloc[0]
    assert r["refuse"] == ""
    assert [r["prefill_tokens"], r["prefill_batch"], r["decode_workers"], r["decode_batch"]] == [
        16896,
        2,
        5,
        16,
    ]


def test_h100_recorded_row_takes_its_directory_step(tmp_path):
    """An H100 TensorRT-LLM (Dynamo 0.8.1.post3) db-dump row of 6 clients, 1k/1k, records prefill 1 worker
    of attention DP 16 and decode 3 workers of tp 16 at batch 2: its non-MTP recipe
    ctx1_gen3_tep16_batch1_eplb0_mtp0.yaml lies in recipes/trtllm/h100-fp8/1k1k/, whose every file states
    prefill max_num_tokens 2048 and max_batch_size 2 per rank: the row's prefill step (not the dump's 1)."""
    engine = "trtllm,0.8.1.post3,deepseek-ai/DeepSeek-V3,h100_sxm,fp8,disagg,{isl},1024,fp8,fp8,,,,,,"
    pools = "1,1,1,1,16,1,16,2,3,16,1,1,1,16"
    r = frame(tmp_path, dumped(6, "2026-02-08T00:00:00.000Z", pools, engine=engine, post=3)).iloc[0]
    assert r["refuse"] == "" and [r["prefill_tokens"], r["prefill_batch"]] == [2048, 2]
    assert r["recipe"] == "recipes/trtllm/h100-fp8/1k1k/stp/ctx1_gen3_tep16_batch1_eplb0_mtp0.yaml"
