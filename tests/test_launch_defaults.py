"""How the dev CSV's rows were launched (framework/data/validation/aic_mapping.yaml `launches`,
framework/runs/aic_launches.py launch_of, validation_predict.inferencex_tokens) and DeepSeek's dense
first layers in the MoE cost (framework/opcost/moe.py head_row)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import inferencex_source, silicon_row
from decodelab.components.models.experts import ffn_ops
from decodelab.kernel_layout import N_MGRID
from decodelab.opcost.moe import head_row
from decodelab.runs import aic_launches
from decodelab.runs.validation_predict import inferencex_tokens, launch_engine, row_launch


def aic_row(**cells) -> pd.Series:
    image = "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3"
    source = inferencex_source("DeepSeek-R1", 4, "2026-02-05T19:55:05Z", image)
    who = {"backend": "trtllm", "backend_version": "1.2.0rc6.post3", "model_path": "deepseek-ai/DeepSeek-R1"}
    return silicon_row(source, **{**who, **cells})


def test_a_post3_deepseek_row_runs_inferencex_mtp_launch():
    got = aic_launches.launch_of(aic_row())
    assert got["engine_file"] == "trtllm_inferencex_mtp"
    assert got["tokens_rule"] == (64, 64, 0, 3, 1)  # extra, round, floor, MTP k, k under attention DP
    row = {"concurrency": 4, "isl": 1024, "dp": 1, **got}
    assert row_launch(row, "trtllm", "auto") == "inferencex-trtllm-mtp"
    # InferenceX dsr1_fp4_b200_trt_mtp.sh: ((MTP + 1) x CONC + ISL + 64 + 63) / 64 x 64
    want = (4 * 4 + 1024 + 64 + 63) // 64 * 64
    assert launch_engine(row, "trtllm", "auto") == {"max_tokens_per_step": want}
    # --launch aic: its template's max_num_tokens and max_batch_size from bs = the row's clients
    assert launch_engine(row, "trtllm", "aic") == {"max_tokens_per_step": 4 + 1024 + 1500, "max_batch": 4}
    # attention DP 8: MTP = 1, the per-rank batch CONC / 8
    dp = {**row, "concurrency": 64, "dp": 8}
    assert inferencex_tokens(dp) == {"max_tokens_per_step": (2 * 8 + 1024 + 64 + 63) // 64 * 64}


def test_the_launches_by_version_and_date():
    post2 = aic_launches.launch_of(aic_row(backend_version="1.2.0rc6.post2"))
    assert post2["engine_file"] == "trtllm_inferencex" and post2["tokens_rule"] == (64, 64, 8192, 0, 0)
    pr392 = aic_row(backend_version="1.1.0rc2.post2", silicon_data_source="measured=2026-01-14T22:26:21Z")
    assert aic_launches.launch_of(pr392)["engine_file"] == "trtllm_inferencex_mtp"
    dec = aic_row(backend_version="1.1.0rc2.post2", silicon_data_source="measured=2025-12-15T00:00:00.000Z")
    assert aic_launches.launch_of(dec)["engine_file"] == "trtllm_inferencex"
    own = aic_row(backend_version="1.3.0rc1")  # AIConfigurator's own gap-analysis rows
    assert aic_launches.launch_of(own) == aic_launches.NO_LAUNCH
    assert aic_launches.launch_of(aic_row(mode="disagg")) == aic_launches.NO_LAUNCH
    gptoss = aic_launches.launch_of(
        aic_row(backend="vllm", backend_version="0.15.1", model_path="openai/gpt-oss-120b")
    )
    assert "engine.moe_mxfp4=w4a8" in gptoss["launch_overrides"] and gptoss["tokens_rule"] == ()
    # kv-cache-dtype fp8 from 25506e87c (2025-12-05)
    assert "workload.kv_dtype=fp8" in gptoss["launch_overrides"]
    # v0.10.2 (2025-11-02): async-scheduling, the auto (BF16) KV cache
    for system in ("b200_sxm", "h200_sxm"):
        row = aic_row(backend="vllm", backend_version="", model_path="openai/gpt-oss-120b", system=system)
        old = aic_launches.launch_of(row)["launch_overrides"]
        assert "engine.overlap=true" in old and not any(o.startswith("workload.kv_dtype") for o in old)


def test_engine_field_follows_the_defaults_chain():
    assert aic_launches.engine_field("trtllm_inferencex_mtp", ("mtp", "k")) == 3
    assert aic_launches.engine_field("trtllm_inferencex", ("kv_block_tokens",)) == 32  # default.yaml's
    assert aic_launches.engine_field("trtllm_inferencex", ("mtp", "k")) == 0


def test_dense_first_layers_are_not_charged_the_moe_block():
    """DeepSeek-V3's 3 dense layers of 61: the MoE head op (repeated 61 times) carries 58/61 of the
    measured block plus the roofline of the dense layers' and shared expert's weights, so the 61
    repeats charge the block 58 times."""
    m = SimpleNamespace(
        d_model=7168, n_layers=61, first_dense_layers=3, ffn_dim=18432, ffn_act="swiglu",
        n_experts=256, experts_per_token=8, n_shared_experts=1, expert_ffn_dim=2048,
    )  # fmt: skip
    head = ffn_ops(m, 8, 1.0, 2.0, 4.0)[2]
    assert head.name == "gate_up_proj" and head.moe_block[0] == "head"
    assert head.moe_block[7] == pytest.approx(58 / 61)
    block = np.full(N_MGRID, 100e-6)  # 100 us per MoE layer at every token count
    t0, beyond = head_row(head, block, bw=8e12, peak=1e18, bw_eff=1.0, c_eff=1.0)
    dense_w = 3 * 7168 * 3 * 18432 / 8 / 61  # per repeat: 3 dense FFNs' weights (1 byte) over 8 GPUs
    shared_w = 58 * 7168 * 3 * 2048 / 8 / 61  # the shared expert of the 58 MoE layers
    assert t0 == pytest.approx(58 / 61 * 100e-6 + (dense_w + shared_w) / 8e12, rel=1e-6)
    assert 61 * t0 == pytest.approx(58 * 100e-6 + 61 * (dense_w + shared_w) / 8e12, rel=1e-6)
