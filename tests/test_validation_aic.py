"""AIConfigurator's silicon_sample.csv schema read by `decodelab validate` (framework/runs/aic_rows.py,
docs/validation.md "Reading AIConfigurator's silicon rows"): each quirk of the schema by a hand-worked
row, the rows refused with their reason, and another predictor's numbers beside ours (--peer)."""

import re

import pandas as pd
import pytest
from decodelab.runs import aic_rows
from decodelab.runs.validation import read_rows
from decodelab.runs.validation_peer import peer_stats, read_peer

HEAD = (
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
    "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
    + ",".join(f"{side}_{k}" for side in ("prefill", "decode") for k in aic_rows.POOL_KEYS)
    + ",silicon_ttft_ms,silicon_tpot_ms\n"
)
NO_POOLS = "," * 13  # the 14 empty prefill_* / decode_* cells of an aggregated row


def agg(
    src="s",
    model="Qwen/Qwen3-32B",
    prec="fp8",
    batch=8,
    tp=1,
    adp=1,
    moe="1,1",
    system="h100_sxm",
    engine="vllm,0.18.0",
    ttft=100.0,
    tpot=10.0,
):
    return (
        f"r,{src},{engine},{model},{system},{prec},agg,1024,128,fp8,fp8,{batch},{tp},1,{adp},{moe},"
        f"{NO_POOLS},{ttft},{tpot}\n"
    )


def frame(tmp_path, *rows):
    p = tmp_path / "silicon.csv"
    p.write_text(HEAD + "".join(rows))
    assert aic_rows.is_aic(p)
    return aic_rows.frame(p)


def test_a_hash_inside_a_field_is_kept(tmp_path):
    """silicon_data_source holds image names like nvcr.io#nvidia/...: the `#` is text, not a comment
    (pandas' comment='#' cut the line there and shifted every later column to NaN)."""
    src = "source_file=x.csv; silicon_concurrency=8; image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3"
    df = frame(
        tmp_path, "# a comment line\n", agg(src=src, engine="trtllm,1.2.0rc6.post3", ttft=123.5, tpot=9.25)
    )
    r = df.iloc[0]
    assert (r["engine"], r["engine_version"], r["mode"], r["refuse"]) == (
        "trtllm",
        "1.2.0rc6.post3",
        "agg",
        "",
    )
    assert (r["ttft_ms"], r["tpot_ms"], r["concurrency"], r["row"]) == (123.5, 9.25, 8, 1)


def test_empty_precision_is_bf16_and_fp4_of_an_mxfp4_checkpoint_is_mxfp4(tmp_path):
    df = frame(tmp_path, agg(prec=""), agg(model="openai/gpt-oss-120b", prec="fp4", moe="1,1"))
    assert list(df.precision) == ["bf16", "mxfp4"]
    _, items = read_rows(tmp_path / "silicon.csv")
    assert "workload.weight_dtype=bf16" in items[0][1] and "workload.kv_dtype=bf16" in items[0][1]
    assert "workload.weight_dtype=mxfp4" in items[1][1]


def test_moe_columns_on_a_dense_model_are_ignored(tmp_path):
    """Qwen3-32B rows carry moe_tp_size 1 and moe_ep_size 0: a dense model runs tensor parallel only."""
    df = frame(tmp_path, agg(tp=2, batch=16, moe="1,0"))
    r = df.iloc[0]
    assert r["refuse"] == "" and r["tp"] == 2 and r["dp"] == 1
    assert "moe_tp" not in df.columns and "moe_ep" not in df.columns
    _, items = read_rows(tmp_path / "silicon.csv")
    key = items[0][1]
    assert "hardware.tensor_parallel=2" in key and not any("moe_mapping" in k for k in key)


def test_batch_size_is_per_attention_dp_rank(tmp_path):
    """DeepSeek-R1, tp 1 x attention DP 8, experts 1 x 8: batch_size 16 per rank = 128 clients on
    8 GPUs (tensor_parallel 8 in attention groups of 1, whole experts per GPU). A TensorRT-LLM row
    of tp_size 4 with attention_dp_size empty and silicon_concurrency 224 = 56 x 4 ran its 4 GPUs
    as attention-DP ranks (TensorRT-LLM's tensor_parallel_size counts them; aic_mapping.yaml
    unrecorded_attention_dp); a recorded silicon_concurrency no split gives, or another engine's,
    leaves the split ambiguous: refused."""
    ds = dict(model="deepseek-ai/DeepSeek-R1", system="b200_sxm", engine="trtllm,1.2.0rc6.post3")
    df = frame(
        tmp_path,
        agg(batch=16, adp=8, moe="1,8", src="silicon_concurrency=128", **ds),
        agg(batch=16, adp=8, moe="1,8", **ds),
        agg(batch=56, adp="", tp=4, moe="4,1", src="silicon_concurrency=224", **ds),
        agg(batch=56, adp="", tp=4, moe="4,1", src="silicon_concurrency=200", **ds),
        agg(
            batch=56,
            adp="",
            tp=4,
            moe="4,1",
            src="silicon_concurrency=224",
            **{**ds, "engine": "vllm,0.12.0"},
        ),
    )
    assert list(df.concurrency) == [128, 128, 224, 200, 224]
    assert list(df.refuse[:3]) == ["", "", ""] and (df.tp[2], df.dp[2]) == (1, 4)
    for r in df.refuse[3:]:
        assert r.startswith("ambiguous concurrency: batch_size 56 x attention_dp_size 1 = 56 clients")
        assert "no attention-DP size of the 4 GPUs gives it" in r
    _, items = read_rows(tmp_path / "silicon.csv")
    key = items[0][1]
    for k in (
        "hardware.n_chips=8",
        "hardware.tensor_parallel=8",
        "hardware.attention_dp=8",
        "hardware.moe_mapping=ep",
    ):
        assert k in key


def test_splits_the_model_cannot_run_are_refused_with_a_reason(tmp_path):
    ds = dict(model="deepseek-ai/DeepSeek-V3", system="h200_sxm")
    df = frame(
        tmp_path,
        agg(tp=16, moe="4,4", **ds),  # two HGX boards
        agg(tp=1, adp=8, moe="2,4", **ds),  # experts split both ways: runs (hardware.moe_ep)
        agg(tp=1, moe="2,1", model="openai/gpt-oss-120b", engine="trtllm,1.2.0rc6"),  # 2 x 1 shards on 1 GPU
        agg(model="Qwen/Qwen3-Next-80B-A3B-Instruct"),
    )
    kinds = [aic_rows.reason_kind(r) for r in df.refuse]
    assert kinds == [
        "multi-node",
        "",
        "inconsistent expert split",
        "model family not modelled",
    ]
    assert (df.dp[1], df.moe_tp[1], df.moe_ep[1]) == (8, 2, 4)
    assert "16 GPUs, more than the 8 of one h200_sxm NVLink domain" in df.refuse[0]
    assert "Gated DeltaNet" in df.refuse[3]


def test_vllm_moe_rows_run_on_their_experts_split(tmp_path):
    """AIConfigurator's generator launches a vLLM MoE row on tensor_parallel_size = moe_tp x moe_ep //
    attention DP GPUs (aic_mapping.yaml unified_tensor_parallel): Qwen3-235B-A22B-FP8 recorded tp_size 1
    with moe 2 x 1 runs as tp 2 (experts 2 x 1), tp_size 2 with moe 4 x 1 as tp 4; a dense model's moe
    columns are not read (Qwen3-32B tp 1 stays tp 1); TensorRT-LLM rows keep the refusal above."""
    q = dict(model="Qwen/Qwen3-235B-A22B-FP8", system="h200_sxm", engine="vllm,0.12.0")
    df = frame(tmp_path, agg(tp=1, moe="2,1", **q), agg(tp=2, moe="4,1", **q), agg(tp=1, moe="2,1"))
    assert list(df.refuse) == ["", "", ""]
    assert [(r.tp, r.dp, r.moe_tp, r.moe_ep) for r in df.iloc[:2].itertuples()] == [
        (2, 1, 2, 1),
        (4, 1, 4, 1),
    ]
    assert df.tp[2] == 1 and df.concurrency[0] == 8


def test_peer_mape_on_the_rows_both_predict(tmp_path):
    """Three rows: ours predicts rows 1 and 2 (+10% and -20% TPOT), the peer rows 2 and 3 (+5%, x);
    the peer column is taken on row 2 only: ours 20%, the peer's 5%."""
    df = pd.DataFrame(
        {
            "row": [1, 2, 3],
            "id": ["a", "b", "c"],
            "status": ["ok", "ok", "refused"],
            "tpot_meas": [10.0, 20.0, 30.0],
            "tpot_pred": [11.0, 16.0, float("nan")],
            "ttft_meas": [100.0, 200.0, 300.0],
            "ttft_pred": [150.0, 100.0, float("nan")],
        }
    )
    p = tmp_path / "peer.csv"
    p.write_text("row,tpot_ms,ttft_ms\n2,21.0,260\n3,33.0,300\n")
    s = peer_stats(read_peer(p, df))
    assert s["tpot_both"] == 1 and s["tpot_mape_both"] == pytest.approx(20.0)
    assert s["tpot_peer_mape"] == pytest.approx(5.0) and s["ttft_peer_mape"] == pytest.approx(30.0)
    p.write_text("id,tpot_ms\nb,22.0\n")
    s = peer_stats(read_peer(p, df))
    assert s["tpot_peer_mape"] == pytest.approx(10.0) and s["ttft_both"] == 0
    p.write_text("name,tpot_ms\nb,22.0\n")
    with pytest.raises(ValueError, match="needs a `row`"):
        read_peer(p, df)
    # a bad cell is one error naming it, never a prediction taken or dropped in silence; an empty
    # one is no prediction; rows the measured CSV lacks are left, but not a file of only those
    for text, message in [
        ("row,tpot_ms\n2,-3\n", "row 2: tpot_ms=-3 must be a number > 0"),
        ("row,tpot_ms\n2,abc\n", "row 2: tpot_ms='abc' must be a number > 0"),
        ("row,tpot_ms\n1.5,3\n", "row=1.5 must be a positive integer"),
        ("row,tpot_ms\n9,3\n", "no row of it is a row of the measured CSV"),
    ]:
        p.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)):
            read_peer(p, df)
    p.write_text("row,tpot_ms\n1,\n2,21.0\n9,3\n")
    assert peer_stats(read_peer(p, df))["tpot_both"] == 1


def test_validate_peer_on_a_tiny_csv(tmp_path):
    """End to end: two Llama-3.1-8B rows run, a disaggregated one is counted by reason, the peer's
    MAPE is printed beside ours."""
    from conftest import cli

    rows = [
        agg(
            model="meta-llama/Llama-3.1-8B-Instruct",
            prec="",
            batch=4,
            engine="trtllm,1.0.0rc3",
            ttft=60,
            tpot=7,
        ),
        agg(
            model="meta-llama/Llama-3.1-8B-Instruct",
            prec="",
            batch=8,
            engine="trtllm,1.0.0rc3",
            ttft=80,
            tpot=8,
        ),
        "d,s,trtllm,1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,1024,128,fp8,fp8,,,,,,,"
        + "," * 13
        + ",50,7\n",
    ]
    csv = tmp_path / "silicon.csv"
    csv.write_text(HEAD + "".join(rows))
    peer = tmp_path / "peer.csv"
    peer.write_text("row,tpot_ms,ttft_ms\n1,7.7,66\n2,8.8,88\n")
    out = cli(
        tmp_path, "validate", "--csv", str(csv), "--peer", str(peer), "--no-track", "-j", "1", "--out", "o"
    )
    assert out.returncode == 0, out.stderr
    assert "TPOT peer" in out.stdout and "10.0%" in out.stdout  # the peer is 10% off on both rows
    assert "mode=disagg" in out.stdout and "over 2 rows run of 3" in out.stdout
    refused = pd.read_csv(tmp_path / "o" / "silicon_refused.csv")
    assert list(refused.row) == [3] and list(refused.kind) == ["mode=disagg pools not recorded"]


def test_deepseek_v3_1_is_deepseek_v3s_shapes(compose):
    """conf/model/deepseek_v3_1.yaml (HF deepseek-ai/DeepSeek-V3.1, the V3 architecture): the
    671,026,404,352 parameters its source line states, every shape field equal to DeepSeek-V3's (the NVFP4
    checkpoints' BF16 ops, quant_bf16_ops, are the checkpoint's: V3.1-NVFP4's list was not found)."""
    from decodelab.components.models import layers

    v31, v3 = compose("model=deepseek_v3_1").model, compose("model=deepseek_v3").model
    assert layers.param_counts(v31)["total"] == 671_026_404_352
    skip = ("name", "source", "quant_bf16_ops")
    assert {k: v for k, v in v31.items() if k not in skip} == {k: v for k, v in v3.items() if k not in skip}
    assert aic_rows.model_of("nvidia/DeepSeek-V3.1-NVFP4") == ("deepseek_v3_1", "")
