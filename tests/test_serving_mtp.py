"""In-engine MTP speculative decoding in serving runs (engine.mtp; framework/modes/serving/mtp.py,
stepcost.py): tokens per step by hand, the scheduler's step count and its reference twin."""

from __future__ import annotations

import math

import pytest
from conftest import NO_FRONTEND, assert_serve_matches_reference, compose_cfg
from decodelab.components.speculative import mtp_tokens_per_step
from decodelab.core.build import build
from decodelab.modes.resolve import resolved
from decodelab.modes.serving import metrics as SM
from decodelab.modes.serving import mtp
from decodelab.modes.serving.layout import StepLog

# a small model given an MTP module, so the tests build in a second
SMALL = ("model=llama3_2_1b", "hardware=h100_sxm", "model.n_mtp_modules=1")


def test_tokens_per_step_by_hand():
    # 1 + p1 + p1 p2 + p1 p2 p3, later positions taking the last value (DeepSeek-V3's figures)
    assert mtp_tokens_per_step([0.85, 0.63], 0) == 1.0
    assert mtp_tokens_per_step([0.85, 0.63], 1) == pytest.approx(1.85)
    assert mtp_tokens_per_step([0.85, 0.63], 2) == pytest.approx(1 + 0.85 + 0.85 * 0.63)
    assert mtp_tokens_per_step([0.85, 0.63], 3) == pytest.approx(1 + 0.85 + 0.5355 + 0.5355 * 0.63)
    assert mtp_tokens_per_step([1.0], 4) == 5.0
    with pytest.raises(ValueError):
        mtp_tokens_per_step([1.2], 1)


def test_engine_slots_follow_the_model_and_attention_dp():
    cfg = resolved(compose_cfg(*SMALL, "model.mtp_acceptance=[0.85,0.63]", "engine.mtp.k=3"))
    assert mtp.engine_slots(cfg) == (3.0, pytest.approx(mtp_tokens_per_step([0.85, 0.63], 3)))
    no_module = resolved(compose_cfg("model=llama3_2_1b", "hardware=h100_sxm", "engine.mtp.k=3"))
    assert mtp.engine_slots(no_module) == (0.0, 1.0)  # a model without an MTP module runs without it


def test_one_client_steps_by_hand():
    """Acceptance 1 and k = 1: the prefill emits the first token, every decode step two more, so
    an output of 9 tokens takes 1 + 4 steps (8 without MTP); each decode step verifies 2 tokens."""
    base = ("workload=closed_loop", "workload.concurrency=1", "workload.n_requests=1")
    base += ("workload.prompt_len=200", "workload.output_len=9", "workload.warmup_requests=0")
    base += ("engine.host_iter_us=0", "engine.host_per_req_us=0", *NO_FRONTEND)  # the GPU step alone
    on = resolved(compose_cfg(*SMALL, *base, "model.mtp_acceptance=[1.0]", "engine.mtp.k=1"))
    off = resolved(compose_cfg(*SMALL, *base))
    steps_on = assert_serve_matches_reference(on)
    steps_off = assert_serve_matches_reference(off)
    assert len(steps_on) == 1 + math.ceil((9 - 1) / 2)
    assert len(steps_off) == 1 + 8
    assert steps_on[1:, StepLog.TOKENS].tolist() == [2.0] * 4
    # a verify step of 2 tokens plus the draft pass costs more than a 1-token step, less than two
    assert steps_off[1, StepLog.DUR] < steps_on[1, StepLog.DUR] < 2 * steps_off[1, StepLog.DUR]


@pytest.mark.parametrize("engine", ["default", "vllm", "sglang_0_5_8"])
def test_scheduler_matches_reference_with_mtp(engine):
    cfg = compose_cfg(
        *SMALL, f"engine={engine}", "workload=closed_loop", "workload.concurrency=16",
        "workload.n_requests=40", "workload.prompt_len=900", "workload.output_len=60",
        "model.mtp_acceptance=[0.8,0.6]", "engine.mtp.k=3",
    )  # fmt: skip
    steps = assert_serve_matches_reference(resolved(cfg))
    assert steps[:, StepLog.TOKENS].max() >= 4  # decode sequences put k + 1 tokens into a step


def test_mtp_designs_hold_the_module_and_its_kv():
    cfg = resolved(
        compose_cfg(*SMALL, "workload=closed_loop", "model.mtp_acceptance=[0.8]", "engine.mtp.k=1")
    )
    design, draft = mtp.designs(cfg)
    plain = build(cfg)
    assert design.memory["kv_pool_bytes"] < plain.memory["kv_pool_bytes"]  # the module's weights beside
    per_tok = SM.kv_bytes_per_token_chip(design)
    assert per_tok == pytest.approx(SM.kv_bytes_per_token_chip(plain) * 17 / 16)  # 16 layers + the module's
