"""Disaggregated rows without pool sizes mapped to InferenceX's recipes (framework/runs/aic_recipes.py,
aic_mapping.yaml `disagg_recipes`, framework/data/validation/inferencex_disagg.yaml): one row's pools
by hand, and the rows that stay refused with the reason that says which."""

from decodelab.runs import aic_rows
from test_validation_aic import frame

# InferenceX's dsr1-fp4-b200-dynamo-trt as PR #588 (efe2f531c) stated it, merged 2026-01-29 15:52:13Z
SRC = (
    "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency={c}; measured={t}; wip=False; image=x"
)
T588 = "2026-01-29T15:52:16Z"
FP4 = "trtllm,0.8.1.post1,deepseek-ai/DeepSeek-R1,b200_sxm,fp4,disagg,{isl},1024,nvfp4,nvfp4,,,,,,"
# pool sizes empty; per-pool tp/pp/adp/moe as the dump records them (POOL_KEYS order per side)
POOLS = ",,4,1,1,1,4,,,8,1,1,2,4"


def row(c, t=T588, isl=1024, engine=FP4):
    return f"d,{SRC.format(c=c, t=t)},{engine.format(isl=isl)},{POOLS},1000.0,20.0\n"


def test_one_row_recipe_by_hand(tmp_path):
    """B200 TensorRT-LLM (Dynamo 0.8.1.post1) FP4 1k/1k at 4096 clients, measured 3 s after PR #588
    merged: its one recipe is the non-MTP ctx1_gen1_dep8_batch512_eplb0_mtp0 (prefill 1 worker of tp 4,
    ep 4, dp-attn; decode 1 worker of tp 8, ep 8, dp-attn). So prefill: 1 worker, attention DP 4
    (tp 1), experts 1 x 4; decode: 1 worker, attention DP 8, experts 1 x 8, batch 512 per rank
    (the file name's batch512); prefill batch cap 8 per rank (the file's prefill max_batch_size:
    aic_mapping.yaml `prefill_step`); clients 4096 (the recorded ones; 8 ranks x 512 = 4096 too).
    The recorded decode moe 2 x 4 is not used."""
    r = frame(tmp_path, row(4096)).iloc[0]
    assert r["refuse"] == "" and r["concurrency"] == 4096 and r["tp"] == 1
    assert r["recipe"] == "recipes/trtllm/b200-fp4/1k1k/stp/ctx1_gen1_dep8_batch512_eplb0_mtp0.yaml"
    cols = ("workers", "tp", "pp", "dp", "moe_tp", "moe_ep", "batch")
    got = [r[f"{side}_{k}"] for side in ("prefill", "decode") for k in cols]
    assert got == [1, 1, 1, 4, 1, 4, 8, 1, 1, 1, 8, 1, 8, 512]


def test_batch_from_clients_when_the_recipe_name_has_none(tmp_path):
    """B200 SGLang 0.5.8.post1 FP4 1k/1k at 32 clients (PR #672, 46e0b5ff0, merged 2026-02-11
    01:17:02Z): low-latency-dep4-1p-tep8-6d: decode 6 workers of tp 8 (attention TP), ep 8; no
    batch in the name: ceil(32 / 6) = 6 per worker."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    r = frame(tmp_path, row(32, t="2026-02-11T01:17:05Z", engine=sg)).iloc[0]
    assert r["refuse"] == ""
    assert [r["decode_workers"], r["decode_tp"], r["decode_dp"], r["decode_moe_ep"], r["decode_batch"]] == [
        6,
        8,
        1,
        8,
        6,
    ]
    assert [r["prefill_workers"], r["prefill_tp"], r["prefill_dp"]] == [1, 1, 4]


def test_ambiguous_recipes_stay_refused_naming_both(tmp_path):
    """512 clients of the same SGLang FP4 key: max-tpt-dep4-1p-dep8-1d and -2d (1 or 2 decode workers)
    both list 512: refused, the reason names both recipe files."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    r = frame(tmp_path, row(512, t="2026-02-11T01:17:05Z", engine=sg)).iloc[0]
    assert aic_rows.reason_kind(r["refuse"]) == "mode=disagg ambiguous recipe"
    assert "max-tpt-dep4-1p-dep8-1d.yaml" in r["refuse"] and "max-tpt-dep4-1p-dep8-2d.yaml" in r["refuse"]
    assert "\n" not in r["refuse"]


def test_mtp_no_recipe_and_date_only_rows(tmp_path):
    """6 clients: the MTP and non-MTP ctx1_gen5_tep8_batch1 recipes (same pools) both list 6: which
    ran is not recorded; 875 clients: only the MTP recipe (ctx1_gen5_dep8_batch16_mtp3): run with
    its draft (tests/test_disagg_mtp.py); 7 clients: no recipe. A db-dump copy's date-only time (T00:00:00.000Z) matches the
    recipes stated that UTC day (4096 as above); a day before PR #588, none."""
    df = frame(
        tmp_path,
        row(6),
        row(875),
        row(7),
        row(4096, t="2026-01-29T00:00:00.000Z"),
        row(4096, t="2026-01-28T00:00:00.000Z"),
    )
    kinds = [aic_rows.reason_kind(r) if r else "" for r in df["refuse"]]
    assert kinds == [
        "mode=disagg MTP or not",
        "",
        "mode=disagg no recipe",
        "",
        "mode=disagg no recipe",
    ]
    assert df.iloc[3]["decode_batch"] == 512 and df.iloc[1]["decode_mtp"] == 3


H200 = "trtllm,0.8.1.post1,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,disagg,{isl},1024,fp8,fp8,,,,,,"
SGL_FP4 = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")


def sourced(c, t, image, engine, isl=1024):
    src = f"source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency={c}; measured={t}; wip=False; image={image}"
    return f"d,{src},{engine.format(isl=isl)},{POOLS},1000.0,20.0\n"


def test_h200_trtllm_rows_take_the_clients_their_recipe_file_states(tmp_path):
    """InferenceX's H200 TensorRT-LLM key lists c64 for c64_ctx1_gen9_tep8_batch256_eplb0_mtp0, whose srt-slurm
    file's benchmark runs `concurrencies: "576"` (9 decode workers x 64): a row of 576 clients measured after
    PR #698 (2026-02-14 06:57:32Z) runs it: decode 9 workers of tp 8 (attention TP), batch 256, no MTP. 64
    clients match no H200 recipe file of 1k/1k (aic_mapping.yaml disagg_recipes `clients`)."""
    img = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post1"
    df = frame(
        tmp_path,
        sourced(576, "2026-02-14T06:57:35Z", img, H200),
        sourced(64, "2026-02-14T06:57:35Z", img, H200),
    )
    r = df.iloc[0]
    assert r["refuse"] == "" and r["concurrency"] == 576
    assert [r["decode_workers"], r["decode_tp"], r["decode_dp"], r["decode_batch"], r["decode_mtp"]] == [
        9,
        8,
        1,
        256,
        0,
    ]
    assert aic_rows.reason_kind(df.iloc[1]["refuse"]) == "mode=disagg no recipe"


def test_the_image_a_row_names_picks_the_mtp_key(tmp_path):
    """B200 SGLang FP4 1k/1k at 16 clients: the non-MTP key (image ...-cu130-runtime) and the -mtp key (image
    ...-cu130) both list 16 on the same pools (low-latency-dep4-1p-tep8-5d). A row naming the -mtp key's image
    ran it: decode MTP 2 (the file's --speculative-num-steps), no draft in the prefill pool; one naming the
    -runtime image ran the non-MTP recipe."""
    t = "2026-02-11T22:38:20Z"
    df = frame(
        tmp_path,
        sourced(16, t, "lmsysorg/sglang:v0.5.8.post1-cu130", SGL_FP4),
        sourced(16, t, "lmsysorg/sglang:v0.5.8.post1-cu130-runtime", SGL_FP4),
    )
    mtp, plain = df.iloc[0], df.iloc[1]
    assert mtp["refuse"] == "" and plain["refuse"] == ""
    assert [mtp["prefill_mtp"], mtp["decode_mtp"], plain["decode_mtp"]] == [0, 2, 0]
    assert mtp["decode_workers"] == plain["decode_workers"] == 5


def test_a_twin_that_records_the_pools_picks_the_recipe(tmp_path):
    """512 clients of the SGLang FP4 key match max-tpt-dep4-1p-dep8-1d and -2d (1 or 2 decode workers):
    refused alone (above). A db-dump row of the same run (the same TTFT and TPOT to the last digit,
    the same clients) records 2 decode workers of attention DP 8: the row runs the -2d recipe; a dump
    row with another measurement is no twin and leaves it refused."""
    sg = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.8.post1")
    dump = "db-dump/2026-04-27; config_id=9; silicon_concurrency=512; measured=2026-02-11T00:00:00.000Z"
    pools = "1,1,1,1,4,1,4,32,2,1,1,8,1,8"  # prefill 1 x adp 4 (batch 1), decode 2 x adp 8, batch 32
    twin = f"t,{dump},{sg.format(isl=1024)},{pools},1000.0,20.0\n"
    other = f"t,{dump},{sg.format(isl=1024)},{pools},1000.0,20.5\n"
    df = frame(tmp_path, row(512, t="2026-02-11T01:17:05Z", engine=sg), twin)
    r = df.iloc[0]
    assert r["refuse"] == "" and [r["decode_workers"], r["decode_dp"], r["decode_batch"]] == [2, 8, 32]
    alone = frame(tmp_path, row(512, t="2026-02-11T01:17:05Z", engine=sg), other).iloc[0]
    assert aic_rows.reason_kind(alone["refuse"]) == "mode=disagg ambiguous recipe"


def test_sglang_pools_take_their_recipe_files_memory_share(tmp_path):
    """B200 SGLang FP4 1k/1k at 32 clients runs low-latency-dep4-1p-tep8-6d, whose srt-slurm file gives
    both pools `mem-fraction-static: 0.85` (aic_mapping.yaml `disagg_recipes.mem_fraction`): each pool's
    engine sizes its KV pool as 0.85 of the GPU less the weights, without a start-up profile; a pool
    whose recipe states none keeps the engine file's rule."""
    from decodelab.runs.validation_disagg import mem_fraction, pool_settings

    r = frame(tmp_path, row(32, t="2026-02-11T01:17:05Z", engine=SGL_FP4)).iloc[0]
    assert (r["prefill_mem_fraction"], r["decode_mem_fraction"]) == (0.85, 0.85)
    want = {"kv_mem_basis": "total", "profile_reserve": False, "kv_mem_fraction": 0.85}
    engine = pool_settings(r, "sglang", False)["disagg.decode.engine"]
    assert {k: engine[k] for k in want} == want
    assert mem_fraction({"decode_mem_fraction": float("nan")}, "decode") == {}


def test_trtllm_pools_take_their_recipe_files_free_memory_share(tmp_path):
    """The 4096-client TensorRT-LLM row of test_one_row_recipe_by_hand runs
    ctx1_gen1_dep8_batch512_eplb0_mtp0, whose file sets kv_cache_config.free_gpu_memory_fraction 0.75
    (prefill) and 0.8 (decode): each pool keeps TensorRT-LLM's rule (a share of what the weights and
    the start-up profile leave) at its own share."""
    from decodelab.runs.validation_disagg import mem_fraction, pool_settings

    r = frame(tmp_path, row(4096)).iloc[0]
    assert (r["prefill_mem_fraction"], r["decode_mem_fraction"]) == (0.75, 0.8)
    assert mem_fraction(r, "prefill", "trtllm") == {"kv_mem_basis": "free", "kv_mem_fraction": 0.75}
    engine = pool_settings(r, "trtllm", False)["disagg.decode.engine"]
    assert (engine["kv_mem_basis"], engine["kv_mem_fraction"]) == ("free", 0.8)


def test_a_gb200_dep_pool_written_tp1_is_its_ep_gpus(tmp_path):
    """GB200 SGLang 0.5.5.post2 FP4 1k/1k at 8 clients, measured a day after a27b37e5c stated
    dsr1-fp4-gb200-dynamo-sglang (2026-01-19T21:17:10Z): "1 prefill worker at DEP4 and 2 decode workers at
    DEP4", written tp 1, ep 4, dp-attn true. The pools are 4 GPUs each (tools/inferencex_recipes.py pool:
    max(tp, ep)): attention DP 4, experts 1 x 4."""
    gb = FP4.replace("trtllm,0.8.1.post1", "sglang,0.5.5.post2").replace("b200_sxm", "gb200")
    r = frame(tmp_path, row(8, t="2026-01-20T12:00:00Z", engine=gb)).iloc[0]
    assert r["refuse"] == ""
    cols = ("workers", "tp", "dp", "moe_tp", "moe_ep")
    assert [r[f"{side}_{k}"] for side in ("prefill", "decode") for k in cols] == [
        1,
        1,
        4,
        1,
        4,
        2,
        1,
        4,
        1,
        4,
    ]


def test_a_recipe_serves_only_its_model(tmp_path):
    """gptoss-fp4-gb200-dynamo-trt (a27b37e5c, 2026-01-19T21:17:10Z, image tensorrtllm-runtime:0.7.0.post2) at 64
    clients: prefill 1 worker of TP1, decode 1 worker of TP4 (its first search-space item). A gpt-oss row runs it; a
    DeepSeek row with the same cells matches no recipe (aic_mapping.yaml disagg_recipes.models)."""
    gpt = FP4.replace(
        "trtllm,0.8.1.post1,deepseek-ai/DeepSeek-R1,b200_sxm", "trtllm,0.7.0.post2,openai/gpt-oss-120b,gb200"
    )
    ds = gpt.replace("openai/gpt-oss-120b", "deepseek-ai/DeepSeek-R1")
    df = frame(
        tmp_path, row(64, t="2026-01-20T12:00:00Z", engine=gpt), row(64, t="2026-01-20T12:00:00Z", engine=ds)
    )
    r = df.iloc[0]
    assert r["refuse"] == ""
    assert [r["prefill_workers"], r["prefill_tp"], r["decode_workers"], r["decode_tp"]] == [1, 1, 1, 4]
    assert aic_rows.reason_kind(df.refuse[1]) == "mode=disagg no recipe"


def test_a_recorded_rows_decode_batch_is_its_recipes_cap(tmp_path):
    """The db-dump copy of PR #588's run at 180 clients records its pools (prefill 1 worker of attention
    DP 4, experts 1 x 4; decode 5 workers of TP 8, experts 1 x 8) and decode_batch_size 36, which is
    180 clients / 5 workers, a fill-in: its one recipe of those pools, ctx1_gen5_tep8_batch32_eplb0_mtp0,
    caps each decode worker at 32 (the file name's batch32, as its twin without pools, the same
    measurement, reads it: that twin alone matches the MTP recipe too, the recorded row picks the
    non-MTP one). So decode batch 32 and the clients stay 180: 160 decode slots, 20 requests waiting."""
    dump = "db-dump/2026-04-27; config_id=320; silicon_concurrency=180; measured=2026-01-29T00:00:00.000Z"
    pools = "1,1,1,1,4,1,4,36,5,8,1,1,1,8"  # prefill batch 1 x 1 worker ..., decode batch 36 x 5 workers ...
    dumped = f"t,{dump},{FP4.format(isl=1024)},{pools},1000.0,20.0\n"
    r, twin = frame(tmp_path, dumped, row(180)).itertuples(index=False)
    assert r.refuse == "" and r.concurrency == 180
    assert r.recipe == "recipes/trtllm/b200-fp4/1k1k/stp/ctx1_gen5_tep8_batch32_eplb0_mtp0.yaml"
    assert [r.decode_workers, r.decode_tp, r.decode_dp, r.decode_moe_ep, r.decode_batch] == [5, 8, 1, 8, 32]
    assert twin.decode_batch == 32 and twin.recipe == r.recipe


def test_a_recorded_rows_prefill_batch_is_its_recipes_not_the_dumps_one(tmp_path):
    """The db-dump copy of a B200 SGLang FP8 8k/1k run at 64 clients (measured 2026-02-07, image v0.5.8.post1)
    records prefill 1 worker of TP 8, experts 1 x 8, prefill_batch_size 1 (every db-dump row's), and decode 4
    workers of batch 16 (64 / 4): its recipe of those pools, low-latency-tep8-1p4d, states no prefill step
    (aic_mapping.yaml `prefill_step` has no b200-fp8/8k1k directory), so the prefill pool keeps the engine's
    cap (0), not one prompt a step; decode 16, the clients over the workers, as a row without pools reads
    it (no batch in the file name)."""
    dump = "db-dump/2026-04-27; config_id=453; silicon_concurrency=64; measured=2026-02-07T00:00:00.000Z"
    sg = "sglang,0.5.8.post1,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,disagg,8192,1024,fp8,fp8_block,,,,,,"
    pools = "1,1,8,1,1,1,8,16,4,8,1,1,1,8"
    r = frame(tmp_path, f"t,{dump},{sg},{pools},9717.9,13.05\n").iloc[0]
    assert r["refuse"] == "" and r["recipe"] == "recipes/b200-fp8/8k1k/stp/low-latency-tep8-1p4d.yaml"
    assert [r["prefill_workers"], r["prefill_batch"], r["prefill_tokens"], r["decode_batch"]] == [1, 0, 0, 16]
