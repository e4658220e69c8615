"""The benchmark client and launch of each dev-CSV row (framework/data/validation/aic_mapping.yaml
`clients`, `launches`, `not_as_stated`; framework/runs/aic_clients.py, aic_rows.py to_row,
validation_predict.row_workload / row_engine / set_row_values)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import compose_cfg, silicon_row
from decodelab.modes.serving.workload import requests
from decodelab.runs import aic_launches, aic_rows
from decodelab.runs.aic_clients import NO_CLIENT, client_of
from decodelab.runs.validation_predict import launch_engine, row_engine, row_workload, set_row_values
from omegaconf import OmegaConf

IX = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=32; measured={day}T19:55:05Z; wip=False"
AIC = "source_file=/Users/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/Qwen_Qwen3-235B-A22B-FP8.csv; silicon_concurrency=8"


def row(**cells) -> pd.Series:
    size = {"isl": "1024", "osl": "8192", "batch_size": "32", "tp_size": "8", "pp_size": "1"}
    split = {"attention_dp_size": "1", "moe_tp_size": "8", "moe_ep_size": "1"}
    base = {"id": "r", "precision": "fp4", **size, **split, "silicon_ttft_ms": "100", "silicon_tpot_ms": "10"}
    source = IX.format(day="2026-03-25")
    who = {"backend": "sglang", "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-R1"}
    return silicon_row(source, **{**who, **base, **cells})


def test_the_client_by_source_marker_and_date():
    after = client_of(row())
    assert (after["client"], after["range_ratio"], after["warmup_per_client"], after["ttft_ok"]) == (
        "inferencex",
        0.8,
        2,
        True,
    )
    before = client_of(row(silicon_data_source=IX.format(day="2026-01-20")))
    assert (before["warmup_per_client"], before["ttft_ok"]) == (0, False)
    assert "PR #480" in before["ttft_note"]
    dump = client_of(
        row(silicon_data_source="db-dump/2026-04-27; config_id=1; measured=2026-04-22T00:00:00.000Z")
    )
    assert dump["client"] == "inferencex" and dump["ttft_ok"]
    own = client_of(row(silicon_data_source=AIC))
    assert (own["client"], own["range_ratio"], own["requests_per_client"], own["warmup_per_client"]) == (
        "aiconfigurator",
        1.0,
        10,
        2,
    )
    # random-id prompts; genai-perf's Shakespeare keeps the workload's English prose (NaN: not set)
    assert after["prompt_bytes_per_token"] == 6.5 and np.isnan(own["prompt_bytes_per_token"])
    pd_ = client_of(row(mode="disagg"))  # srt-slurm's sa-bench: the same prompts, 2c warm-ups
    assert (pd_["client"], pd_["range_ratio"], pd_["warmup_per_client"], pd_["prompt_bytes_per_token"]) == (
        "inferencex-sa-bench",
        0.8,
        2,
        6.5,
    )
    assert client_of(row(mode="disagg", silicon_data_source=AIC)) == NO_CLIENT


def test_an_inferencex_row_draws_uniform_lengths():
    """benchmark_serving's randint(int(0.8 L), L + 1): isl 1024 -> [819, 1024], osl 8192 -> [6553, 8192]."""
    r = {**aic_rows.to_row(row(), 1)}
    w = row_workload(r)
    assert (w["prompt_dist.kind"], w["prompt_dist.low"], w["prompt_dist.high"]) == ("uniform", 819, 1024)
    assert (w["output_dist.kind"], w["output_dist.low"], w["output_dist.high"]) == ("uniform", 6553, 8192)
    assert (w["n_requests"], w["warmup_requests"]) == (320, 64)
    cfg = compose_cfg("workload=closed_loop", "model=deepseek_r1")
    for k, v in w.items():
        OmegaConf.update(cfg, f"workload.{k}", v)
    _, prompt, output = requests(cfg.workload, 1 << 20)
    assert len(prompt) == 320 and prompt.min() >= 819 and prompt.max() <= 1024
    assert output.min() >= 6553 and output.max() <= 8192 and np.all(output == np.round(output))
    assert len(set(prompt)) > 50  # spread, not one length
    plain = row_workload({"concurrency": 4, "isl": 100, "osl": 10})  # a shipped CSV's row: fixed
    assert (plain["prompt_dist.kind"], plain["output_dist.kind"], plain["warmup_requests"]) == (
        "fixed",
        "fixed",
        8,
    )
    # a key a row leaves out keeps the workload's value (set_row_values restores it)
    assert w["prompt_bytes_per_token"] == 6.5 and "prompt_bytes_per_token" not in plain
    assert plain.keys() == w.keys() - {"prompt_bytes_per_token"}


def test_a_value_one_row_sets_does_not_leak_into_the_next():
    cfg = OmegaConf.create({"engine": {"max_batch": 2048, "recv_interval": 1}})
    first: dict = {}
    set_row_values(cfg, {"engine.max_batch": 32, "engine.recv_interval": 30}, set(), first)
    assert (cfg.engine.max_batch, cfg.engine.recv_interval) == (32, 30)
    set_row_values(cfg, {"engine.max_batch": 64}, set(), first)
    assert (cfg.engine.max_batch, cfg.engine.recv_interval) == (64, 1)
    set_row_values(cfg, {}, {"engine.max_batch"}, first)
    assert cfg.engine.max_batch == 2048


def test_the_sglang_launch_and_its_recv_interval():
    """dsr1_fp4_b200.sh: --scheduler-recv-interval 30 at CONC >= 16, 10 below; FP8 TP4: 10 (design)."""
    for c, want in ((8, 10), (16, 30), (32, 30)):
        r = aic_rows.to_row(
            row(batch_size=str(c), silicon_data_source=IX.format(day="2026-03-25").replace("32", str(c))), 1
        )
        assert r["launch"] == "inferencex-sglang-dsr1-b200-fp4" and r["refuse"] == ""
        assert "engine.kv_mem_basis=total" in r["launch_overrides"]
        assert launch_engine(r, "sglang", "auto") == {"recv_interval": want}
    tp4 = aic_rows.to_row(row(precision="fp8", tp_size="4", moe_tp_size="4"), 1)
    assert tp4["launch"] == "inferencex-sglang-dsr1-b200-fp8-tp4"
    assert "engine.recv_interval=10" in tp4["launch_overrides"]
    h200 = aic_rows.to_row(row(precision="fp8", system="h200_sxm"), 1)
    assert (
        h200["launch"].startswith("inferencex-sglang-dsr1-h200")
        and launch_engine(h200, "sglang", "auto") == {}
    )


def test_per_row_values_of_a_launch():
    assert row_engine({"concurrency": 48, "row_engine": (("max_batch", "{concurrency}"),)}) == {
        "max_batch": 48
    }
    rule = (("recv_interval", {"below": 16, "then": 10, "else": 30}),)
    assert row_engine({"concurrency": 15, "row_engine": rule}) == {"recv_interval": 10}
    h200 = aic_launches.launch_of(
        row(
            backend="trtllm",
            backend_version="gpt-oss-dev",
            model_path="openai/gpt-oss-120b",
            system="h200_sxm",
        )
    )
    assert h200["launch"] == "inferencex-trtllm-gptoss-h200"
    assert launch_engine({"concurrency": 64, "isl": 1024, **h200}, "trtllm", "auto") == {"max_batch": 64}


def test_the_gpt_oss_vllm_h100_rows_at_512_are_refused():
    r = row(
        backend="vllm",
        backend_version="0.11.2",
        model_path="openai/gpt-oss-120b",
        system="h100_sxm",
        batch_size="512",
        tp_size="2",
        moe_tp_size="2",
        silicon_data_source=IX.format(day="2025-12-08").replace("32", "512"),
    )
    assert aic_rows.to_row(r, 1)["refuse"].startswith("concurrency not as run: 512")
    ok = r.copy()
    ok["batch_size"] = "64"
    ok["silicon_data_source"] = IX.format(day="2025-12-08").replace("32", "64")
    assert aic_rows.to_row(ok, 1)["refuse"] == ""


def test_the_sglang_fp4_checkpoint_and_moe_kernel():
    """Every InferenceX SGLang B200 FP4 script runs FlashInfer's TRTLLM-gen MoE; the 2025-11-02 runs served
    DeepSeek-R1-0528-FP4 (o_proj BF16), every later one the -V2 checkpoint (o_proj NVFP4)."""
    v2 = "model.quant_bf16_ops.nvfp4=[qkv_a_proj,q_b_proj,q_absorb,v_absorb,kv_b_decompress]"
    for day, launch, checkpoint_v2 in (("2025-11-02", "-v1", False), ("2026-03-25", "", True)):
        r = aic_rows.to_row(row(silicon_data_source=IX.format(day=day)), 1)
        assert r["launch"] == "inferencex-sglang-dsr1-b200-fp4" + launch
        assert "engine.moe_backend=trtllm" in r["launch_overrides"]
        assert (v2 in r["launch_overrides"]) == checkpoint_v2


def test_the_2025_11_18_sglang_fp8_rows_take_the_v0_5_5_engine_file():
    """No backend_version, but nvidia-master.yaml @189ae51cc ran lmsysorg/sglang:v0.5.5-cu129-amd64."""
    r = aic_launches.launch_of(
        row(precision="fp8", backend_version="", silicon_data_source=IX.format(day="2025-11-18"))
    )
    assert (r["launch"], r["engine_file"]) == ("inferencex-sglang-dsr1-b200-fp8-v0-5-5", "sglang_0_5_8")
