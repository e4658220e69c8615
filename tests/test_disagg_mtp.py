"""In-engine MTP inside disaggregated pools (framework/modes/serving/disagg_pools.py pool_design; the
draft length per pool from InferenceX's recipes, framework/runs/aic_recipes.py draft_tokens): one
request worked by hand, the scheduler against its pure-Python reference in a decode pool (Eng.READY)
and a prefill pool (one output token), and a dev-set MTP row's pools and launch settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import NO_FRONTEND, compose_cfg
from decodelab.core.build import build
from decodelab.core.reference import reference_step
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving import disagg_pools as DG
from decodelab.modes.serving import metrics as SM
from decodelab.modes.serving import mtp
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, Req, StepLog
from decodelab.modes.serving.reference import engine_dict, reference_serve, reference_table
from decodelab.runs.validation_disagg import pool_settings
from test_disagg_recipes import POOLS, T588, frame, row

# a small model given an MTP module (tests/test_serving_mtp.py), the hardware's host cost per step
SMALL = ("model=llama3_2_1b", "hardware=h100_sxm", "model.n_mtp_modules=1")
HW_HOST = ("engine.host_iter_us=null", "engine.host_per_req_us=0", "engine.overlap=false")
HW_HOST += NO_FRONTEND
HW_HOST += ("engine.eager_launch_us=null",)  # no per-kernel dispatch of eager steps: the GPU time shows
FIXED = ("workload.prompt_dist.kind=fixed", "workload.output_dist.kind=fixed")
ONE = ("workload=open_loop", "workload.n_requests=1", "workload.prompt_len=1024", "workload.output_len=9")
REQ_COLS = [Req.ARRIVAL, Req.START, Req.FIRST, Req.DONE, Req.PREEMPT, Req.MAX_ITL]


def _gpu(cost: dict) -> float:
    return sum(v for c, v in cost.items() if c != "host")


def test_one_request_by_hand():
    """One request, p = 1024, o = 9, 1P1D, k = 1 with acceptance 1 (every draft accepted: 2 tokens
    a step). Prefill pool: the target's prefill step (eager) plus the draft's pass over the 1024
    prompt positions, drafting after the first token: prefill_ttft = t_pre + the draft's GPU time.
    KV: the module's layer's KV crosses too, 17/16 of the 16-layer target's. Decode pool: each step
    verifies 2 positions and emits 2 tokens, so 9 tokens take ceil(9 / 2) = 5 steps (9 without
    MTP); TTFT ends with step 0, TPOT = steps 1..4 / (o - 1) = 8 tokens."""
    base = (*SMALL, *ONE, *FIXED, *HW_HOST, "disagg=ib_1p1d", "model.mtp_acceptance=[1.0]")
    cfg = compose_cfg(*base, "engine.mtp.k=1")
    res = evaluate(cfg)
    m, steps = res["metrics"], res["serving"]["steps"]
    assert res["status"] == "ok", res["reason"]
    assert len(steps) == math.ceil(9 / 2) and steps[:, StepLog.TOKENS].tolist() == [2.0] * 5
    (pc, design, mixed, draft), notes = DG.pool_design(cfg, "prefill")
    assert draft is not None and any("prefill pool: MTP" in n for n in notes)
    dcfg = mtp.draft_cfg(pc)
    d_mixed = S.mixed_design(dcfg, build(dcfg))[0]
    p = 1024.0
    t_pre = sum(reference_step(mixed, pc, p, p, 1.0, prefill=True).values())
    t_draft = _gpu(reference_step(d_mixed, dcfg, p, p, 1.0, prefill=True))
    assert m["prefill_ttft_ms"] == pytest.approx((t_pre + t_draft) * 1e3, rel=1e-9)
    off = evaluate(compose_cfg(*base))
    assert len(off["serving"]["steps"]) == 9
    assert m["kv_transfer_mib"] == pytest.approx(off["metrics"]["kv_transfer_mib"] * 17 / 16, rel=1e-12)
    dur = steps[:, StepLog.DUR]
    assert m["tpot_ms"] == pytest.approx(dur[1:].sum() / 8 * 1e3, rel=1e-9)
    assert m["ttft_ms"] == pytest.approx(m["prefill_ttft_ms"] + m["kv_transfer_ms"] + dur[0] * 1e3, rel=1e-9)
    assert m["tpot_ms"] < off["metrics"]["tpot_ms"]


def _pool_matches_reference(cfg, ready: bool):
    """The pool's scheduler (its design beside the MTP module, the draft's arrays) against the
    pure-Python reference with the draft's designs; returns the kernel's steps."""
    design, d = mtp.designs(cfg)
    draft = S.draft_args(cfg, d)
    p = S.prepare(cfg, design, draft=draft)
    p["eng"][Eng.READY] = 1.0 if ready else 0.0
    args = list(p["kernel_args"])
    if not ready:  # a prefill pool: every request ends with its first token
        args[-2] = np.ones(len(p["prompt"]))
    req, steps, status = SK.serve(*args)
    dcfg = mtp.draft_cfg(cfg)
    ref = reference_serve(
        design, cfg, p["mixed"], engine_dict(p["eng"], p["buckets"]), p["arrival"], p["prompt"], args[-2],
        p["think"], (d, S.mixed_design(dcfg, d)[0], dcfg),
    )  # fmt: skip
    assert status == 0
    np.testing.assert_allclose(req[:, REQ_COLS], reference_table(ref), rtol=1e-9, atol=1e-12)
    return steps


@pytest.mark.parametrize("engine", ["default", "sglang_0_5_8"])
def test_decode_and_prefill_pools_match_reference(engine):
    """Requests arriving with their KV (a decode pool: k + 1 positions a step, a queue at the
    batch cap) and prompts ending at their first token (a prefill pool: the draft's passes after
    the prompt), MTP k = 2: the Numba scheduler equals the reference."""
    cfg = compose_cfg(
        *SMALL, f"engine={engine}", "workload=open_loop", "workload.n_requests=14", "workload.arrival_rate=80",
        "workload.prompt_len=300", "workload.output_len=20", "model.mtp_acceptance=[0.8,0.6]",
        "engine.mtp.k=2", "engine.max_batch=4",
    )  # fmt: skip
    steps = _pool_matches_reference(cfg, ready=True)
    assert steps[:, StepLog.TOKENS].max() >= 3 and (steps[:, StepLog.PREFILL] == 0).all()
    steps = _pool_matches_reference(cfg, ready=False)
    assert (steps[:, StepLog.DECODE] == 0).all()  # prefill-only steps


def test_mtp_recipe_row_runs_with_its_draft_length(tmp_path):
    """875 clients of PR #588's B200 FP4 1k/1k key: only ctx1_gen5_dep8_batch16_eplb0_mtp3 lists it
    (decode 5 workers x attention DP 8, batch 16 per rank: 640 slots). Its file name states
    num_nextn_predict_layers 3 for both pools: prefill_mtp = decode_mtp = 3, engine.mtp.k (and its
    attention-DP k) 3 in each pool; under AIConfigurator's launch the decode budget is 16 x (1 + 3)
    = 64 tokens. 6 clients (an MTP and a non-MTP recipe of the same pools) stay refused."""
    df = frame(tmp_path, row(875), row(6), row(4096, t=T588))
    r = df.iloc[0]
    assert r["refuse"] == ""
    assert [r["prefill_mtp"], r["decode_mtp"], r["decode_workers"], r["decode_dp"], r["decode_batch"]] == [
        3,
        3,
        5,
        8,
        16,
    ]
    s = pool_settings(r, "trtllm", aic=True)
    cutlass = {f"moe_backend{x}": "cutlass" for x in ("", "_attention_dp", "_fp8_block")}  # the file's (dep8)
    assert s["disagg.decode.engine"] == {
        "max_tokens_per_step": 64,
        "mtp.k": 3,
        "mtp.k_attention_dp": 3,
        **cutlass,
        "kv_mem_basis": "free",  # the file's free_gpu_memory_fraction (aic_mapping.yaml mem_fraction)
        "kv_mem_fraction": 0.8,
    }
    assert s["disagg.prefill.engine"]["mtp.k"] == 3 and s["disagg.decode.max_batch"] == 16
    assert df.iloc[1]["refuse"].startswith("mode=disagg MTP or not")
    plain = pool_settings(df.iloc[2], "trtllm", aic=True)  # the non-MTP recipe: no draft
    assert "mtp.k" not in plain["disagg.decode.engine"] and df.iloc[2]["decode_mtp"] == 0


def test_sglang_mtp_recipe_takes_the_listed_steps():
    """SGLang recipe files do not name their draft length: aic_mapping.yaml `mtp_steps` lists what
    each file states (H200 bs8-1p6d-mtp: decode --speculative-num-steps 2, no speculative settings
    in its prefill section); an MTP file not listed is refused (None)."""
    from decodelab.runs import aic_recipes

    e = {"mtp": True, "backend": "sglang", "config_file": "recipes/h200/8k1k/bs8-1p6d-mtp.yaml"}
    assert aic_recipes.draft_tokens(e) == {"prefill_mtp": 0, "decode_mtp": 2}
    assert aic_recipes.draft_tokens({**e, "config_file": "recipes/h200/8k1k/unlisted-mtp.yaml"}) is None
    trt = {"mtp": True, "backend": "trtllm", "config_file": "x/ctx1_gen4_dep8_batch256_eplb0_mtp2_1024.yaml"}
    assert aic_recipes.draft_tokens(trt) == {"prefill_mtp": 2, "decode_mtp": 2}
    assert aic_recipes.draft_tokens({**trt, "mtp": False}) == {"prefill_mtp": 0, "decode_mtp": 0}


def test_kv_bytes_of_an_mtp_pool_include_the_module():
    cfg = compose_cfg(*SMALL, "workload=open_loop", "model.mtp_acceptance=[0.8]", "engine.mtp.k=1")
    design, _ = mtp.designs(cfg)
    assert SM.kv_bytes_per_token_chip(design) == pytest.approx(
        SM.kv_bytes_per_token_chip(build(cfg)) * 17 / 16, rel=1e-12
    )


def test_a_recipe_file_whose_name_counts_the_worker_batch(tmp_path):
    """B200 FP8 1k/1k at 1600 clients (PR #919, measured 2026-03-23 13:00:07Z): ctx1_gen2_dep8_batch768_eplb0_mtp2_1600
    names 768 = the worker's 8 attention-DP ranks x its max_batch_size 96 (the srt-slurm file): decode batch 96 per
    rank (2 workers x 8 ranks x 96 = 1536 slots for 1600 clients), MTP 2 in both pools, decode budget 96 x 3 = 288
    (the file's max_num_tokens)."""
    eng = "trtllm,0.8.1.post2,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,disagg,{isl},1024,fp8,fp8,,,,,,"
    img = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2"
    src = f"source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=1600; measured=2026-03-23T13:00:07Z; wip=False; image={img}"
    r = frame(tmp_path, f"d,{src},{eng.format(isl=1024)},{POOLS},1000.0,20.0\n").iloc[0]
    assert r["refuse"] == ""
    assert [r["decode_workers"], r["decode_dp"], r["decode_batch"], r["decode_mtp"], r["prefill_mtp"]] == [
        2,
        8,
        96,
        2,
        2,
    ]
    assert pool_settings(r, "trtllm", aic=True)["disagg.decode.engine"]["max_tokens_per_step"] == 288
