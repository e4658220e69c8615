"""SGLang's eager prefill dispatch (conf/engine/sglang.yaml eager_launch_us, from sgl-project/sglang PR
#12160): DeepSeek-V3's eager extend forward costs ~82.6 ms of host dispatch, which decodelab spreads
over the 1160 kernel calls it counts in that forward; a prefill step whose GPU work is shorter lasts
that long (framework/modes/serving/stepcost.py step_time)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, assert_serve_matches_reference, compose_cfg
from decodelab.core.build import build
from decodelab.modes.serving import engine_vector as EV
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Req, StepLog

# DeepSeek-V3 on 8 B200 under SGLang 0.5.9 (its engine file), NVFP4 weights, FP8 KV: the InferenceX
# B200 FP4 rows' design (framework/data/validation/aic_mapping.yaml inferencex-sglang-dsr1-b200-fp4).
DSV3 = (
    "model=deepseek_v3",
    "engine=sglang_0_5_8",
    "hardware=b200_sxm",
    "hardware.n_chips=8",
    "hardware.tensor_parallel=8",
    "workload.weight_dtype=nvfp4",
    "workload.kv_dtype=fp8",
)
# decodelab's calls of one DeepSeek-V3 forward: 61 layers x 18 calls (norms, the MLA projections,
# attention, all-reduces, router, MoE GEMMs and activation), the expert routing of the 58 MoE layers,
# embedding, final norm, LM head and sampling.
CALLS = 61 * 18 + 58 + 4
PR_12160_MS = 82.64  # "forward cost-82.6406478881836 ms", eager, 1 new token


def test_eager_forward_is_pr_12160s():
    """1160 calls x 71 us = 82.36 ms: PR #12160's eager DeepSeek-V3 forward within 0.5%."""
    cfg = compose_cfg(*DSV3)
    design = build(cfg)
    assert float(np.sum(design.call_rep)) == CALLS == 1160
    host = EV.eager_fields(cfg, design)["eager_host"]
    assert host == pytest.approx(1160 * 71e-6)
    assert host * 1e3 == pytest.approx(PR_12160_MS, rel=0.005)


def test_one_client_prefill_step_is_host_bound():
    """One client, one 1000-token prompt: the prefill step's GPU work (~28 ms at TP8, NVFP4) is
    shorter than its dispatch, so under the overlap scheduler the step lasts the host's
    host_iter 300 us + host_per_req 5 us x 1 + 82.36 ms = 82.67 ms (an idle engine starts it at the
    arrival). The loop sends its first token once it has launched the next step, a decode step
    replaying a CUDA graph: its host work, 300 + 5 us, later (scheduler.late_tokens); TTFT 82.97 ms."""
    cfg = compose_cfg(
        *DSV3,
        "workload=closed_loop",
        "workload.concurrency=1",
        "workload.n_requests=1",
        "workload.prompt_len=1000",
        "workload.output_len=4",
        *NO_FRONTEND,  # TTFT from the scheduler's arrival
    )
    design = build(cfg)
    req, steps, *_ = S.simulate_serving(cfg, design)
    pre = steps[steps[:, StepLog.PREFILL] > 0]
    assert len(pre) == 1
    want = 300e-6 + 5e-6 + 1160 * 71e-6
    assert pre[0, StepLog.DUR] == pytest.approx(want, rel=1e-9)
    gpu = pre[0, StepLog.CAUSE : StepLog.CAUSE + 7].sum() - pre[0, StepLog.CAUSE + 4]
    assert gpu < 0.5 * want  # the GPU work hides none of the dispatch
    assert req[0, Req.FIRST] - req[0, Req.ARRIVAL] == pytest.approx(want + 300e-6 + 5e-6, rel=1e-9)
    assert_serve_matches_reference(cfg)  # the jitted scheduler = its pure-Python reference
