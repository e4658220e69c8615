"""Disaggregated rows of AIConfigurator's silicon schema in `decodelab validate`
(framework/runs/aic_rows.py disagg_of, framework/runs/validation_disagg.py): one row's pools mapped
by hand, the rows still refused with their one-line reason, and a small row run end to end."""

import math

import pytest
from decodelab.runs import aic_rows
from decodelab.runs.validation import read_rows, run_validation
from decodelab.runs.validation_disagg import pool_settings
from test_validation_aic import HEAD, frame

R1 = "deepseek-ai/DeepSeek-R1,b200_sxm,fp8,disagg,8192,1024,fp8,fp8_block,,,,,,"


def disagg(pools: str, src="silicon_concurrency=20", engine="sglang,0.5.9", model=R1, ttft=900.5, tpot=20.25):
    return f"d,{src},{engine},{model},{pools},{ttft},{tpot}\n"


# prefill: batch 1, 1 worker of tp 1 x attention DP 8, experts 1 x 8;
# decode: batch 4, 5 workers of tp 8, experts 1 x 8 (POOL_KEYS order per side)
POOLS = "1,1,1,1,8,1,8,4,5,8,1,1,1,8"


def test_one_row_pools_by_hand(tmp_path):
    """DeepSeek-R1 on B200, SGLang 0.5.9: prefill 1 worker of 1 x 8 GPUs (attention DP 8, whole
    experts per GPU), decode 5 workers of TP 8 (whole experts per GPU), decode batch 4 per rank:
    5 x 1 x 4 = 20 clients = the recorded silicon_concurrency. As conf/disagg pools: prefill 1
    instance of tensor_parallel 8 in 8 attention groups, moe_mapping ep (one expert group per GPU:
    moe_ep 0); decode 5 instances of tensor_parallel 8, one attention group, moe_mapping ep; the KV
    over ib_1p1d's InfiniBand. SGLang from 0.5.8 runs AIConfigurator's launch: prefill batch cap 1,
    max_prefill_tokens 8192 + 1500 = 9692 on both pools, CUDA graphs for every batch (no buckets)."""
    df = frame(tmp_path, disagg(POOLS))
    r = df.iloc[0]
    assert r["refuse"] == "" and r["concurrency"] == 20 and r["tp"] == 8
    cols = ("workers", "tp", "dp", "moe_tp", "moe_ep", "batch")
    got = [r[f"{side}_{k}"] for side in ("prefill", "decode") for k in cols]
    assert got == [1, 1, 8, 1, 8, 1, 5, 8, 1, 1, 8, 4]
    _, items = read_rows(tmp_path / "silicon.csv")
    key = items[0][1]
    for k in (
        "disagg=ib_1p1d",
        "disagg.prefill.instances=1",
        "disagg.prefill.tensor_parallel=8",
        "disagg.prefill.attention_dp=8",
        "disagg.prefill.moe_mapping=ep",
        "disagg.prefill.moe_ep=0",
        "disagg.decode.instances=5",
        "disagg.decode.tensor_parallel=8",
        "disagg.decode.attention_dp=1",
        "disagg.decode.moe_mapping=ep",
        "workload=closed_loop",
        "hardware=b200_sxm",
    ):
        assert k in key, k
    assert not any(k.startswith("hardware.attention_dp") for k in key)  # the run's hardware: no split
    assert pool_settings(r, "sglang", aic=True) == {
        "disagg.prefill.max_batch": 1,
        "disagg.prefill.engine": {"max_tokens_per_step": 9692, "batch_buckets": []},
        "disagg.decode.max_batch": 4,
        "disagg.decode.engine": {"max_tokens_per_step": 9692, "batch_buckets": []},
    }
    trt = pool_settings(r, "trtllm", aic=True)
    assert trt["disagg.prefill.engine"] == {"overlap": False, "max_tokens_per_step": 9692}
    assert trt["disagg.decode.engine"] == {"max_tokens_per_step": 4}
    assert pool_settings(r, "trtllm", aic=False) == {
        "disagg.prefill.max_batch": 1,
        "disagg.decode.max_batch": 4,
    }


def test_pools_with_experts_split_both_ways_and_vllm_zero_moe_columns(tmp_path):
    """Decode experts 2 x 4 over 8 GPUs -> moe_mapping ep with 4 expert groups (hardware.moe_ep 4);
    a vLLM Qwen3-235B row writes moe 0 x 0: not recorded, the experts over all the pool's GPUs
    (moe_mapping tp), as vLLM without --enable-expert-parallel."""
    both = "1,1,8,1,1,8,1,4,1,8,1,1,2,4"
    qwen = "Qwen/Qwen3-235B-A22B-FP8,h100_sxm,fp8,disagg,4000,1000,fp8,fp8,,,,,,"
    vllm = "1,1,1,1,4,0,0,24,3,4,1,1,0,0"
    df = frame(
        tmp_path,
        disagg(both, src="silicon_concurrency=4"),
        disagg(vllm, src="s", engine="vllm,0.12.0", model=qwen),
    )
    assert list(df.refuse) == ["", ""]
    assert (df.decode_moe_tp[0], df.decode_moe_ep[0]) == (2, 4)
    assert (df.prefill_moe_tp[1], df.prefill_moe_ep[1], df.decode_moe_tp[1], df.concurrency[1]) == (
        4,
        1,
        4,
        72,
    )
    _, items = read_rows(tmp_path / "silicon.csv")
    assert "disagg.decode.moe_mapping=ep" in items[0][1] and "disagg.decode.moe_ep=4" in items[0][1]
    assert "disagg.decode.moe_mapping=tp" in items[1][1] and "disagg.prefill.attention_dp=4" in items[1][1]


def test_disaggregated_rows_still_refused_say_why(tmp_path):
    """Pool sizes not recorded (most of the dev file: AIConfigurator's own estimator needs them too),
    pipeline stages in a pool, and a recorded concurrency the pools do not give: each refused with
    one line naming the pools. A worker of 16 H100s (two nodes) runs: its collectives cross the
    scale-out network (hardware.nvlink_domain, scale_out_bw_gb_s)."""
    unrecorded = ",,8,1,1,1,8,,,8,1,1,1,8"
    wide = "1,1,1,1,16,1,16,2,3,16,1,1,1,16"
    staged = "1,1,4,2,1,4,1,4,5,8,1,1,1,8"
    h100 = R1.replace("b200_sxm", "h100_sxm")
    df = frame(
        tmp_path,
        disagg(unrecorded),
        disagg(wide, src="silicon_concurrency=6", model=h100),
        disagg(staged),
        disagg(POOLS, src="silicon_concurrency=24"),
    )
    kinds = [aic_rows.reason_kind(r) for r in df.refuse]
    assert kinds == [
        "mode=disagg pools not recorded",
        "",
        "mode=disagg prefill pool pipeline stages",
        "mode=disagg ambiguous concurrency",
    ]
    assert "prefill ? x (tp 8, adp 1, moe 1x8, batch ?)" in df.refuse[0]
    assert "= 20 clients, but silicon_data_source records silicon_concurrency=24" in df.refuse[3]
    assert all("\n" not in r for r in df.refuse) and math.isnan(df.tp[0])
    _, items = read_rows(tmp_path / "silicon.csv")
    assert "disagg.prefill.tensor_parallel=16" in items[1][1] and "disagg.decode.instances=3" in items[1][1]


@pytest.mark.slow
def test_a_small_disaggregated_row_runs(tmp_path):
    """Qwen3-32B FP8 on H100 under vLLM 0.12.0: 2 prefill workers of 1 GPU, 1 decode worker of TP 2
    with 4 clients: predicted TTFT and TPOT are finite and positive, TTFT above one decode step."""
    qwen = "Qwen/Qwen3-32B,h100_sxm,fp8,disagg,1024,64,fp8,fp8,,,,,,"
    p = tmp_path / "silicon.csv"
    p.write_text(HEAD + disagg("1,2,1,1,1,0,0,4,1,2,1,1,0,0", src="s", engine="vllm,0.12.0", model=qwen))
    df = run_validation(p)
    r = df.iloc[0]
    assert r["status"] == "ok", r["reason"]
    assert 0 < r["tpot_pred"] < r["ttft_pred"] < 1e4 and r["concurrency"] == 4
