"""Copies of one measurement in the dev CSV's dumps (framework/runs/aic_rows.py twin_key, same_run): a
copy that prints the same float one digit apart is still the same run, and a copy takes from the others
what it lacks (the time to the second, the run's config_id), so every copy runs the same launch."""

from __future__ import annotations

from test_aic_candidates import expanded
from test_disagg_recipes import FP4, row

SGL = "sglang,0.5.8.post1,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,disagg,8192,1024,fp8,fp8_block,,,,,,"
SGL_POOLS = ",,8,1,1,8,1,,,8,1,1,8,1"
IMAGE = "image=lmsysorg/sglang:v0.5.8.post1-cu130-amd64"


def sglang_8k(source: str) -> str:
    return f"d,{source}; silicon_concurrency=1024; {{t}}; wip=False; {IMAGE},{SGL},{SGL_POOLS},500.0,50.0\n"


def test_a_copy_one_digit_apart_is_the_same_run(tmp_path):
    """180 clients of the TensorRT-LLM FP4 key match the MTP and non-MTP ctx1_gen5_tep8_batch32 recipes (both
    run alone). Its db-dump copy records the pools and prints TTFT 1000.0000000000002 for 1000.0: the same
    run to 12 digits, so the copy without pools takes the recorded one's non-MTP recipe."""
    dump = "db-dump/2026-04-27; config_id=320; silicon_concurrency=180; measured=2026-01-29T00:00:00.000Z"
    pools = "1,1,1,1,4,1,4,36,5,8,1,1,1,8"
    _, alone = expanded(tmp_path, row(180))
    assert len(alone) == 2
    _, df = expanded(tmp_path, row(180), f"t,{dump},{FP4.format(isl=1024)},{pools},1000.0000000000002,20.0\n")
    assert len(df) == 2 and list(df["row"]) == [1, 2]
    assert df["decode_mtp"][0] == 0 and df["recipe"].nunique() == 1  # row 1 runs the non-MTP recipe


def test_a_day_only_copy_takes_its_copys_time(tmp_path):
    """B200 SGLang FP8 8k / 1k at 1,024 clients: the 2026-04-06 dump states the UTC day only
    (T00:00:00.000Z), which four recipes of that day fit; the 2026-03-25 dump's copy, 21:01:05Z, fits two
    (the MTP and non-MTP maxtpt_3 files). With both in the table each runs those two."""
    day = sglang_8k("source_file=2026-04-06.csv; model=DeepSeek-R1").format(
        t="measured=2026-03-18T00:00:00.000Z"
    )
    exact = sglang_8k("source_file=2026-03-25.csv; model=DeepSeek-R1").format(
        t="measured=2026-03-18T21:01:05Z"
    )
    _, alone = expanded(tmp_path, day)
    assert len(alone) == 4
    _, df = expanded(tmp_path, day, exact)
    assert list(df["row"]) == [1, 1, 2, 2]
    assert {r.split("/")[-1] for r in df["recipe"]} == {"8k1k_stp_maxtpt_3.yaml", "8k1k_mtp_maxtpt_3.yaml"}


def test_a_copy_takes_the_config_id_its_db_dump_copy_names(tmp_path):
    """B200 SGLang 0.5.9 FP8 1k / 1k at 64 clients, measured 2026-03-25: the run swept the MTP and the non-MTP
    config alike, so the 2026-03-25 dump's row could be either (two launches); its db-dump copy names
    config_id=87, the non-MTP config (aic_mapping.yaml `launches`: the MTP entry's source_not), and so
    both copies run that one launch."""
    eng = (
        "sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,64,8,1,1,8,1"
        + "," * 14
    )
    src = (
        "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=64; measured=2026-03-25T16:34:14Z"
    )
    dump = "db-dump/2026-04-27; config_id=87; silicon_concurrency=64; measured=2026-03-25T00:00:00.000Z"
    copy = f"c,{src}; image=lmsysorg/sglang:v0.5.9-cu130,{eng},799.0,22.5\n"
    _, alone = expanded(tmp_path, copy)
    assert len(alone) == 2
    _, df = expanded(tmp_path, copy, f"d,{dump}; lmsysorg/sglang:v0.5.9-cu130,{eng},799.0,22.5\n")
    assert list(df["launch"]) == ["inferencex-sglang-dsr1-b200-fp8-0325"] * 2


def test_a_sibling_settled_by_its_copy_leaves_the_other_config(tmp_path):
    """The same run measured 64 clients twice at 16:34:14Z, once per config it swept (MTP and non-MTP):
    TPOT 22.5 and 20.4 ms. The 22.5 ms row's db-dump copy names config_id=87 (non-MTP), so the 20.4 ms
    row, another measurement of that run at that setting, ran the other config: MTP. A row of another
    time is no sibling and stays open."""
    eng = (
        "sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,64,8,1,1,8,1"
        + "," * 14
    )
    src = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=64; measured={t}"
    img = "image=lmsysorg/sglang:v0.5.9-cu130"
    dump = "db-dump/2026-04-27; config_id=87; silicon_concurrency=64; measured=2026-03-25T00:00:00.000Z"
    t = "2026-03-25T16:34:14Z"
    non_mtp = f"a,{src.format(t=t)}; {img},{eng},799.0,22.5\n"
    copy = f"b,{dump}; lmsysorg/sglang:v0.5.9-cu130,{eng},799.0,22.5\n"
    sibling = f"c,{src.format(t=t)}; {img},{eng},700.0,20.4\n"
    later = f"d,{src.format(t='2026-03-25T20:00:00Z')}; {img},{eng},650.0,19.0\n"
    _, df = expanded(tmp_path, non_mtp, copy, sibling, later)
    launch = dict(zip(df["id"], df["launch"]))
    assert launch["a"] == launch["b"] == "inferencex-sglang-dsr1-b200-fp8-0325"
    assert launch["c"] == "inferencex-sglang-dsr1-b200-fp8-mtp"
    assert list(df["id"]).count("d") == 2
