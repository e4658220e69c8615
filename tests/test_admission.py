"""SGLang's admission reserve (framework/modes/serving/admission.py): hand-worked admissions,
the ratio's decay and re-estimate, bad values, and the Numba scheduler against its reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cli, compose_cfg
from decodelab.core.build import build
from decodelab.modes.serving import admission as AD
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.admission import Adm
from decodelab.modes.serving.layout import Eng, Req
from decodelab.modes.serving.reference import engine_dict, reference_serve, reference_table


def _three(ratio: float):
    """Three requests (prompt 100, 50 tokens) at t = 0 on a KV pool of exactly 400 tokens
    (blocks of 1), SGLang-like: separate prefill and decode steps, preemption, chunk 8192."""
    cfg = compose_cfg(
        "workload=open_loop",
        "workload.n_requests=3",
        "workload.prompt_dist.kind=fixed",
        "workload.output_dist.kind=fixed",
        "engine=sglang",
        "engine.lookahead=false",
        f"engine.admit_ratio={ratio}",
        f"engine.admit_ratio_min={min(ratio, 0.098)}",
    )
    design = build(cfg)
    p = S.prepare(cfg, design)
    args = list(p["kernel_args"])
    eng = args[-6].copy()
    eng[Eng.CAP_BLOCKS], eng[Eng.BLOCK] = 400.0, 1.0
    args[-6] = eng
    prompt, output, arrival = np.full(3, 100.0), np.full(3, 50.0), np.zeros(3)
    req, steps, status = SK.serve(*args[:-4], arrival, prompt, output, args[-1][:3])
    assert status == 0
    mixed = S.mixed_design(cfg, design)[0]
    ref = reference_serve(
        design, cfg, mixed, engine_dict(eng, args[-5]), arrival, prompt, output, args[-1][:3]
    )
    np.testing.assert_allclose(req[:, [Req.START, Req.FIRST, Req.DONE]], reference_table(ref)[:, [1, 2, 3]])
    return req, steps


@pytest.mark.slow
def test_reserve_golden():
    """Pool 400 tokens. Step 0 (nothing running): request 0 is admitted (100 tokens; reserve +50);
    request 1 needs 100 + 50 < 400 - 100 - 50 = 250: admitted; request 2 needs 150 < 400 - 200 -
    100 = 100: held back. After the prefill each holds 100 tokens; in every decode step g (g = 1
    .. 49 generated each) free = 200 - 2(g - 1) and the reserve is 2 x ratio x (50 - g) with ratio
    >= 0.098, so 150 < free - reserve never holds while both run: request 2 starts when both end
    (in step 49: 1 prefill step + 49 decode steps). Without the reserve (admit_ratio 0) all
    three prompts (300 <= 400 tokens) are admitted in step 0."""
    req, steps = _three(0.7)
    assert req[0, Req.START] == req[1, Req.START] == 0.0
    assert req[0, Req.FIRST_STEP] == req[1, Req.FIRST_STEP] == 0
    assert req[2, Req.START] == pytest.approx(req[0, Req.DONE], rel=1e-12)
    assert req[0, Req.DONE_STEP] == 49  # 1 prefill step + 49 decode steps
    req0, _ = _three(0.0)
    assert req0[2, Req.FIRST_STEP] == 0 and req0[2, Req.START] == 0.0


def test_ratio_decay_and_reestimate():
    adm = np.zeros(Adm.size)
    adm[[Adm.ON, Adm.RATIO, Adm.INIT, Adm.MIN, Adm.DECAY, Adm.CLIP, Adm.RETRACT]] = [
        1.0,
        0.7,
        0.7,
        0.098,
        (0.7 - 0.098) / 600,
        4096,
        20,
    ]
    run = np.array([0, 1])
    output, gen = np.array([100.0, 5000.0]), np.array([10.0, 0.0])
    AD.start_step(adm, run, 2, output, gen)
    assert adm[Adm.OFFSET] == pytest.approx(0.7 * (90 + 4096))  # the clip: 4096, not 5000
    for _ in range(600):
        AD.end_step(adm, True, False, run, 2, output, gen)
    assert adm[Adm.RATIO] == pytest.approx(0.098)
    AD.end_step(adm, True, False, run, 2, output, gen)  # floored at the minimum
    assert adm[Adm.RATIO] == pytest.approx(0.098)
    AD.end_step(adm, True, True, run, 2, output, gen)  # a preemption: (10 + 0 + 20 x 2) / 5101
    assert adm[Adm.RATIO] == pytest.approx(50.0 / 5101.0)
    AD.idle(adm)
    assert adm[Adm.RATIO] == 0.7
    assert not AD.blocks_admission(adm, 0, 1e9, 0.0)  # nothing runs: never held back


@pytest.mark.slow
@pytest.mark.parametrize(
    "override, field",
    [
        ("engine.admit_ratio=1.5", "engine.admit_ratio=1.5"),
        ("engine.admit_clip_tokens=0", "engine.admit_clip_tokens=0"),
    ],
)
def test_bad_reserve_is_one_error_line(tmp_path, override, field):
    r = cli(tmp_path, "engine=sglang", "workload=open_loop", "workload.n_requests=4", override)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and field in lines[0], r.stderr


@pytest.mark.slow
def test_reserve_needs_preemption(tmp_path):
    r = cli(
        tmp_path, "engine=default", "workload=open_loop", "workload.n_requests=4", "engine.admit_ratio=0.5"
    )
    assert r.returncode == 2 and "on_kv_full=preempt" in r.stderr
