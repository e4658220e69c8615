"""Issue 13: the engine loop's host work (overlap or not), the benchmark client (warm-up excluded,
all clients released at t = 0), whole prompts never starved behind decodes, and `decodelab
validate`'s engine column and malformed CSVs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import NO_FRONTEND, cli, compose_cfg, one_client_cfg, runs_in
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Req, StepLog
from decodelab.runs.validation import (
    base_overrides,
    engine_config_name,
    launch_engine,
    launch_notes,
    run_validation,
)

HEADER = "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _one_client(*ov, p=1000, o=8):
    cfg = one_client_cfg(*ov, p=p, o=o)
    design = build(cfg)
    req, steps, *_ = S.simulate_serving(cfg, design)
    # the decode steps' GPU time: the kernel's uniform batch-1 rows without the host term
    hw = S.serving_hw(design)
    rows = np.array([[1.0, p + g, 1.0, 1.0, 0.0] for g in range(1, o)])
    a = design.arrays()
    gpu = K.simulate(*a[:7], hw, rows).sum(1)
    return steps[steps[:, StepLog.MIXED] == 0], gpu


@pytest.mark.parametrize(
    "overlap, h_iter, h_req, expect",
    [
        # no overlap: the GPU idles for all host work: gpu + 1000 us + 1 x 250 us
        ("false", 1000, 250, lambda gpu: gpu + 1.25e-3),
        # overlap, host work (100 ms + 0.25 ms) longer than any batch-1 step: it sets the pace
        ("true", 100000, 250, lambda gpu: np.full_like(gpu, 100.25e-3)),
        # overlap, host work (1 us) far shorter than the step: hidden, the GPU time alone
        ("true", 1, 0, lambda gpu: gpu),
    ],
)
def test_host_work_term_golden(overlap, h_iter, h_req, expect):
    dec, gpu = _one_client(
        f"engine.overlap={overlap}", f"engine.host_iter_us={h_iter}", f"engine.host_per_req_us={h_req}"
    )
    assert len(dec) == 7
    np.testing.assert_allclose(dec[:, StepLog.DUR], expect(gpu), rtol=1e-12)
    host = dec[:, StepLog.CAUSE + CAUSES.index("host")]
    np.testing.assert_allclose(host, dec[:, StepLog.DUR] - gpu, rtol=1e-9, atol=1e-15)


def test_host_iter_null_is_the_hardware_step_cost():
    """engine.host_iter_us null: the hardware's host_step_us every step, as a static decode."""
    dec, gpu = _one_client("engine.host_iter_us=null", "engine.host_per_req_us=0", "engine.overlap=false")
    host = compose_cfg().hardware.host_step_us * 1e-6
    np.testing.assert_allclose(dec[:, StepLog.DUR], gpu + host, rtol=1e-12)


def test_per_request_host_work_scales_with_the_batch():
    """4 equal clients in lock-step, no overlap: each decode step pays 200 + 4 x 50 = 400 us."""
    base = ("workload=closed_loop", "workload.concurrency=4", "workload.n_requests=4")
    base += ("workload.prompt_len=300", "workload.output_len=5", "engine.overlap=false")
    steps = {}
    for h in (0, 50):
        cfg = compose_cfg(*base, "engine.host_iter_us=200", f"engine.host_per_req_us={h}")
        _, st, *_ = S.simulate_serving(cfg, build(cfg))
        steps[h] = st
    dec0, dec1 = (steps[h][steps[h][:, StepLog.MIXED] == 0] for h in (0, 50))
    assert (dec1[:, StepLog.SEQS] == 4).all()
    np.testing.assert_allclose(dec1[:, StepLog.DUR] - dec0[:, StepLog.DUR], 4 * 50e-6, rtol=1e-9)


def _client(*ov):
    cfg = compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=1",
        "workload.prompt_len=700",
        "workload.output_len=6",
        *ov,
    )
    res = evaluate(cfg)
    assert res["status"] == "ok", res["reason"]
    return res


def test_warmup_requests_are_excluded():
    """One client, 1 warm-up + 2 measured requests, not drained: 3 requests back to back; the
    metrics count the 2 measured ones, the first of which is sent when the warm-up ends."""
    res = _client("workload.n_requests=2", "workload.warmup_requests=1", "workload.warmup_drain=false")
    req = res["serving"]["requests"]
    assert len(req) == 2 and res["metrics"]["n_requests"] == 2.0
    assert req[0, Req.ARRIVAL] > 0.0  # sent when the warm-up request ended
    # every request of one client is the same: TTFT is that of a lone request
    alone = _client("workload.n_requests=1")["metrics"]
    assert res["metrics"]["ttft_ms"] == pytest.approx(alone["ttft_ms"], rel=1e-12)


def test_warmup_exclusion_against_the_whole_run():
    """3 clients, whole prompts, a token budget of one prompt: the first wave queues. With 3
    warm-ups not drained, the metrics are those of requests 3.. of the same 9-request run."""
    ov = ("workload.concurrency=3", "engine.max_tokens_per_step=700")
    whole = _client(*ov, "workload.n_requests=9")
    tail = _client(*ov, "workload.n_requests=6", "workload.warmup_requests=3", "workload.warmup_drain=false")
    r = whole["serving"]["requests"][3:]
    ttft = np.mean(r[:, Req.FIRST] - r[:, Req.ARRIVAL]) * 1e3
    assert tail["metrics"]["ttft_ms"] == pytest.approx(ttft, rel=1e-12)
    # drained (aiperf): the measured phase starts idle with a burst, as a run without warm-up
    drained = _client(*ov, "workload.n_requests=6", "workload.warmup_requests=3")
    plain = _client(*ov, "workload.n_requests=6")
    assert drained["metrics"]["ttft_ms"] == plain["metrics"]["ttft_ms"]


def test_whole_prompt_of_the_full_budget_is_not_starved():
    """2 clients released at t = 0, whole prompts of exactly max_tokens_per_step (512): step 1
    prefills request 0; step 2 cannot fit request 1 next to request 0's decode token (511 left),
    so it is a context-only step: request 1's first token comes from step 2, not after request 0
    has finished its 50 tokens."""
    cfg = compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=2",
        "workload.n_requests=2",
        "workload.prompt_len=512",
        "workload.output_len=50",
        "engine.max_tokens_per_step=512",
    )
    req, steps, *_ = S.simulate_serving(cfg, build(cfg))
    assert req[0, Req.FIRST_STEP] == 0 and req[1, Req.FIRST_STEP] == 1
    assert steps[1, StepLog.DECODE] == 0 and steps[1, StepLog.PREFILL] == 512
    assert np.isfinite(req[:, Req.DONE]).all()


# ---- decodelab validate: the engine column, malformed CSVs -----------------------------------


@pytest.mark.parametrize(
    "engine, version, name",
    [
        ("trtllm", "1.0.0rc3", "default"),
        ("trtllm", "9.9", "default"),  # a later version no file lists: the nearest earlier one's
        ("trtllm", "1.2.0rc6.post1", "default"),
        ("trtllm", "0.21.0", "default"),  # older than every file's: the family's file
        ("vllm", "0.12.0", "vllm"),
        ("vllm", "0.13.0", "vllm"),  # listed: the same defaults (conf/engine/vllm.yaml)
        ("vllm", "0.14.0", "vllm_0_14"),
        ("vllm", "0.14.1", "vllm_0_14"),  # nearest earlier listed version: 0.14.0
        ("vllm", "0.16.0", "vllm_0_16"),  # its serial tokenizer (conf/engine/vllm_0_16.yaml)
        ("vllm", "0.17.0", "vllm_0_19"),  # the Triton top-k / top-p kernel from 0.17.0
        ("vllm", "0.19.0", "vllm_0_19"),
        ("vllm", "0.20.1", "vllm_0_19"),
        ("vllm", "0.10.2", "vllm"),  # older than every file's: the family's first file
        ("vllm", "nightly", "vllm"),  # not a PEP 440 version: the family's first file
        ("sglang", "0.5.1.post1", "sglang"),
        ("sglang", "0.5.2", "sglang"),  # nearest earlier listed version: 0.5.1.post1
        ("sglang", "0.5.3.post2", "sglang_0_5_8"),  # the same defaults (conf/engine/sglang_0_5_8.yaml)
        ("sglang", "0.5.5", "sglang_0_5_8"),  # nearest earlier listed: 0.5.4.post3
        ("sglang", "0.5.8.post1", "sglang_0_5_8"),
        ("sglang", "0.5.9", "sglang_0_5_8"),
        ("sglang", "0.5.11", "sglang_0_5_8"),
        ("SGLang", "", "sglang"),
        ("TensorRT-LLM", "1.0.0rc3", "default"),  # other spellings of the family
        ("tensorrt_llm", "", "default"),
        ("TRT-LLM", "1.2.0rc5", "default"),
        ("vLLM", "0.14.0", "vllm_0_14"),
    ],
)
def test_engine_column_picks_the_config(engine, version, name):
    assert engine_config_name(engine, version) == name


def test_rows_of_unlisted_versions_are_named_with_their_file():
    """`decodelab validate` prints which file ran a version no engine file lists (and nothing for listed ones)."""
    import pandas as pd
    from decodelab.runs.validation import version_notes

    df = pd.DataFrame(
        {
            "engine": ["vllm", "vllm", "trtllm", "vllm", "sglang"],
            "engine_version": ["0.16.0", "0.14.1", "1.2.0rc6.post1", "0.10.2", ""],
            "engine_config": ["vllm_0_14", "vllm_0_14", "default", "vllm", "sglang"],
        }
    )
    assert version_notes(df) == [
        "sglang ran with conf/engine/sglang.yaml (no version given: the family's default file)",
        "trtllm 1.2.0rc6.post1 ran with conf/engine/default.yaml (no file lists it: that of the nearest "
        "earlier listed version, 1.0.0rc3)",
        "vllm 0.10.2 ran with conf/engine/vllm.yaml (no file lists it or an earlier version: the family's "
        "default file)",
        "vllm 0.14.1 ran with conf/engine/vllm_0_14.yaml (no file lists it: that of the nearest earlier "
        "listed version, 0.14.0)",
    ]


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(ValueError) as ei:
        engine_config_name("tgi", "1.0")
    msg = str(ei.value)
    assert "engine 'tgi' has no config in conf/engine/" in msg
    for fam in ("trtllm", "vllm", "sglang"):
        assert fam in msg


@pytest.mark.slow
def test_rows_run_with_their_engine(tmp_path):
    csv = tmp_path / "rows.csv"
    csv.write_text(
        HEADER
        + f"{LLAMA},trtllm,1.0.0rc3,bf16,1,256,8,2,50.0,7.0\n"
        + f"{LLAMA},vllm,0.12.0,bf16,1,256,8,2,50.0,7.0\n"
        + f"{LLAMA},sglang,0.5.1.post1,bf16,1,256,8,2,50.0,7.0\n"
    )
    df = run_validation(csv)
    assert list(df["engine_config"]) == ["default", "vllm", "sglang"]
    assert (df["status"] == "ok").all()
    # vLLM 0.12 exposes its host work (no overlap scheduler); TRT-LLM and SGLang hide theirs under
    # a GPU step this long, so those two may coincide on such a small row
    assert df["tpot_pred"].iloc[1] > df["tpot_pred"].iloc[0]
    # each row says the launch it ran with (`--launch auto`: TensorRT-LLM and vLLM 0.12.0 on
    # AIConfigurator's rules, SGLang 0.5.1.post1 on its file's defaults), and a note per launch
    assert list(df["launch"]) == ["aic", "aic", "defaults"]
    assert launch_notes(df) == [
        "2 rows ran with AIConfigurator's launch rules: trtllm 1.0.0rc3, vllm 0.12.0",
        "1 row ran with the engine files' defaults: sglang 0.5.1.post1",
    ]


def test_auto_launch_is_aiconfigurators_where_the_version_dates_it():
    """`--launch auto` (the default): a TensorRT-LLM row runs with AIConfigurator's generated
    max_num_tokens = bs + isl + 1500 (bs = the row's concurrency), by hand 16 + 1024 + 1500 = 2540, and
    max_batch_size bs;
    a vLLM row from 0.12.0 (Dynamo v0.8.0's pinned vLLM, served after AIConfigurator's generator
    passed --max-num-batched-tokens) and an SGLang row from 0.5.8 (released after it passed SGLang's
    launch flags) with its rules too, CUDA graphs for every batch size (vLLM: max_num_seqs = bs); older or undated versions
    keep their engine files' defaults; `defaults` and `aic` are as named."""
    row = {"concurrency": 16, "isl": 1024}
    assert launch_engine(row, "trtllm", "auto") == {"max_tokens_per_step": 2540, "max_batch": 16}
    assert launch_engine(row, "vllm", "auto") == {} and launch_engine(row, "sglang", "auto") == {}
    assert launch_engine({**row, "engine_version": "0.11.0"}, "vllm", "auto") == {}
    assert launch_engine({**row, "engine_version": "0.11.2"}, "vllm", "auto") == {}
    vllm_aic = {"max_tokens_per_step": 2540, "chunk_size": 2540, "batch_buckets": [], "max_batch": 16}
    sglang_aic = {"mixed_steps": True, "max_tokens_per_step": 2524, "batch_buckets": []}
    assert launch_engine({**row, "engine_version": "0.12.0"}, "vllm", "auto") == vllm_aic
    assert launch_engine({**row, "engine_version": "0.14.0"}, "vllm", "auto") == vllm_aic
    assert launch_engine({**row, "engine_version": "0.19.0"}, "vllm", "auto") == vllm_aic
    assert launch_engine({**row, "engine_version": "0.5.1.post1"}, "sglang", "auto") == {}
    assert launch_engine({**row, "engine_version": "0.5.7"}, "sglang", "auto") == {}
    assert launch_engine({**row, "engine_version": "0.5.8.post1"}, "sglang", "auto") == sglang_aic
    assert launch_engine({**row, "engine_version": "nightly"}, "sglang", "auto") == {}
    assert launch_engine(row, "trtllm", "defaults") == {}
    assert launch_engine(row, "vllm", "aic") == vllm_aic
    assert launch_engine(row, "sglang", "aic") == sglang_aic


def test_validate_run_in_mlflow_says_how_the_rows_ran(tmp_path):
    csv = tmp_path / "rows.csv"
    csv.write_text(HEADER + ROW)
    out = cli(tmp_path, "validate", "--csv", str(csv), "--launch", "defaults", "engine.overlap=false")
    assert out.returncode == 0, out.stderr
    (run,) = runs_in(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    tags = run.data.tags
    assert tags["kind"] == "validate" and tags["launch"] == "defaults" and tags["static"] == "False"
    assert tags["overrides"] == "engine.overlap=false"
    assert run.data.metrics["rows"] == 1.0


def _one_error_line(out, words):
    """The command ended with one `error:` line holding every word, exit status 2, no traceback."""
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    for w in words:
        assert w in lines[0], (w, lines[0])


def _validate(tmp_path, text):
    csv = tmp_path / "rows.csv"
    csv.write_text(text)
    return cli(tmp_path, "validate", "--csv", str(csv), "--no-track")  # in this process


ROW = f"{LLAMA},trtllm,1.0.0rc3,bf16,1,256,8,2,50.0,7.0\n"


@pytest.mark.parametrize(
    "text, words",
    [
        (HEADER, ["has a header but no data rows"]),
        ("", ["is empty"]),
        (HEADER.replace(",engine,", ",") + ROW.replace(",trtllm,", ","), ["lacks columns: engine"]),
        (HEADER + ROW.replace(",256,8,2,", ",-256,8,2,"), ["data row 1", "isl=-256", "positive integer"]),
        (HEADER + ROW + ROW.replace(",256,8,2,", ",256,abc,2,"), ["data row 2", "osl='abc'"]),
        (HEADER + ROW.replace(",256,8,2,", ",256,8,0,"), ["data row 1", "concurrency=0"]),
        (HEADER + ROW.replace(",bf16,1,", ",bf16,1.5,"), ["data row 1", "tp=1.5"]),
        (HEADER + ROW.replace(",50.0,7.0", ",50.0,-1"), ["data row 1", "tpot_ms=-1", "> 0"]),
        (HEADER + ROW.replace(",trtllm,", ",tgi,"), ["data row 1", "engine 'tgi'", "known:"]),
        (HEADER + ROW.replace(",bf16,", ",int3,"), ["data row 1", "precision 'int3'"]),
    ],
)
def test_malformed_csv_is_one_error_line(tmp_path, text, words):
    out = _validate(tmp_path, text)
    _one_error_line(out, words)


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.fp8_checkpoint=foo", ["model.fp8_checkpoint='foo'", "tensor, block"]),
        ("engine.max_batch=0", ["engine.max_batch=0", ">= 1"]),
    ],
)
def test_an_override_no_row_can_run_with_is_one_error_line(tmp_path, override, words):
    """An override every row composes with but no row can run with (a bad value) is one `error:`
    line naming the field, exit status 2, not a table of invalid rows."""
    csv = tmp_path / "rows.csv"
    csv.write_text(HEADER + ROW + ROW.replace(",256,8,2,", ",512,8,2,"))
    out = cli(tmp_path, "validate", "--csv", str(csv), "--no-track", override)
    _one_error_line(out, words)


def test_fp8_checkpoint_override_picks_the_gemm_class():
    """An `fp8` row runs the model file's checkpoint (Qwen3: block-scaled, fp8_block GEMMs) unless
    the user's overrides set model.fp8_checkpoint; bf16 rows are untouched either way."""
    row = pd.Series(
        dict(model="Qwen/Qwen3-0.6B", engine="trtllm", engine_version="1.0.0rc3", precision="fp8", tp=1)
    )
    assert "workload.weight_dtype=fp8_block" in base_overrides(row)
    assert "workload.weight_dtype=fp8" in base_overrides(row, fp8_checkpoint="tensor")
    llama = pd.Series(dict(model=LLAMA, engine="trtllm", engine_version="1.0.0rc3", precision="fp8", tp=1))
    assert "workload.weight_dtype=fp8" in base_overrides(llama)  # its file: per-tensor
    assert "workload.weight_dtype=fp8_block" in base_overrides(llama, fp8_checkpoint="block")
    bf16 = row.copy()
    bf16["precision"] = "bf16"
    assert "workload.weight_dtype=bf16" in base_overrides(bf16, fp8_checkpoint="block")


def _two_requests(lookahead: str, frac: float):
    """Request 0 (prompt 500, 20 tokens) opens the run; request 1 (prompt 300, 4 tokens) arrives
    `frac` of the way into step 3 (a decode step of request 0). Returns (steps, req)."""
    cfg = compose_cfg(
        "workload=open_loop",
        "workload.n_requests=2",
        "workload.prompt_dist.kind=fixed",
        "workload.output_dist.kind=fixed",
        "engine.overlap=true",
        f"engine.lookahead={lookahead}",
        "engine.host_iter_us=1",
        "engine.host_per_req_us=0",
    )
    design = build(cfg)
    p = S.prepare(cfg, design)
    args = list(p["kernel_args"])
    args[-3] = np.array([500.0, 300.0])
    args[-2] = np.array([20.0, 4.0])
    _, st0, _ = SK.serve(*args[:-4], np.array([0.0, 1e9]), *args[-3:])  # request 0's steps alone
    t_arr = st0[3, StepLog.START] + frac * st0[3, StepLog.DUR]
    req, steps, status = SK.serve(*args[:-4], np.array([0.0, t_arr]), *args[-3:])
    assert status == 0
    return steps, req, t_arr


@pytest.mark.parametrize("frac", [0.01, 0.5, 0.99])
def test_overlap_lookahead_golden(frac):
    """Without lookahead a request arriving during step 3 is prefilled in step 4; with the overlap
    scheduler's lookahead (step n+1 is scheduled when step n starts) in step 5: its first token
    comes one step later, at the end of step 5, and step 4 is request 0's decode alone."""
    for lookahead, step in (("false", 4), ("true", 5)):
        steps, req, t_arr = _two_requests(lookahead, frac)
        assert req[1, Req.ARRIVAL] == t_arr
        assert req[1, Req.FIRST_STEP] == step
        assert req[1, Req.FIRST] == pytest.approx(
            steps[step, StepLog.START] + steps[step, StepLog.DUR], rel=1e-12
        )
        assert steps[step - 1, StepLog.PREFILL] == 0 and steps[step, StepLog.PREFILL] == 300


def test_lookahead_needs_an_idle_engine_to_wait_no_longer():
    """An arrival at an idle engine is scheduled at once, lookahead or not."""
    for lookahead in ("false", "true"):
        cfg = compose_cfg(
            "workload=closed_loop",
            "workload.concurrency=1",
            "workload.n_requests=2",
            "workload.prompt_len=200",
            "workload.output_len=3",
            "engine.overlap=true",
            f"engine.lookahead={lookahead}",
            *NO_FRONTEND,
        )
        req, steps, *_ = S.simulate_serving(cfg, build(cfg))
        assert req[1, Req.FIRST_STEP] == 3  # request 0: steps 0-2; request 1's prefill: step 3
        assert steps[3, StepLog.START] == req[1, Req.ARRIVAL]


def _closed_pair(lookahead: str):
    """Two closed-loop clients released at t = 0 with prompts of 200 tokens; request 0 wants 3
    tokens, request 1 eight, so request 0 ends at a step boundary while request 1 decodes on, and
    its client's next request (request 2, 3 tokens) is issued at that boundary."""
    cfg = compose_cfg(
        "workload=closed_loop",
        "workload.concurrency=2",
        "workload.n_requests=3",
        "workload.prompt_len=200",
        "workload.output_len=3",
        "engine.overlap=true",
        f"engine.lookahead={lookahead}",
        "engine.host_iter_us=1",
        "engine.host_per_req_us=0",
        *NO_FRONTEND,
    )
    p = S.prepare(cfg, build(cfg))
    args = list(p["kernel_args"])
    args[-2] = np.array([3.0, 8.0, 3.0])
    req, steps, status = SK.serve(*args)
    assert status == 0
    return req, steps


def test_a_request_issued_at_a_step_boundary_misses_the_step_scheduled_there():
    """Step 0 prefills both prompts (first tokens), steps 1-2 decode both: request 0 ends with step
    2 and its client issues request 2 at that boundary. The engine schedules the step after it in
    the same loop before the client's reply can arrive, so request 2 arrives one ulp after the
    boundary: without lookahead step 3 is request 1's decode alone and request 2 is prefilled in
    step 4; with the overlap scheduler's lookahead (step 4 scheduled when step 3 starts, at the
    boundary too) step 4 is request 1's decode alone as well, and request 2 waits for step 5."""
    for lookahead, first in (("false", 4), ("true", 5)):
        req, steps = _closed_pair(lookahead)
        assert req[0, Req.DONE_STEP] == 2
        assert req[2, Req.ARRIVAL] == np.nextafter(req[0, Req.DONE], np.inf)
        assert req[2, Req.ARRIVAL] > steps[3, StepLog.START] == req[0, Req.DONE]
        assert req[2, Req.FIRST_STEP] == first
        for k in range(3, first):  # request 1's decode alone until then
            assert steps[k, StepLog.SEQS] == 1 and steps[k, StepLog.PREFILL] == 0
        assert steps[first, StepLog.PREFILL] == 200
        ttft = req[2, Req.FIRST] - req[2, Req.ARRIVAL]
        assert ttft == pytest.approx(steps[3 : first + 1, StepLog.DUR].sum(), rel=1e-12)


def _row(**extra):
    base = dict(model="Qwen/Qwen3-30B-A3B", engine="trtllm", engine_version="1.0.0rc3", precision="fp8", tp=2)
    return pd.Series({**base, **extra})


@pytest.mark.parametrize(
    "extra, chips, stages, more",
    [
        ({}, 2, 1, []),  # no parallelism columns: the shipped CSVs' designs
        ({"pp": 1, "dp": 1, "ep": 1}, 2, 1, []),  # ones change nothing
        ({"pp": 2}, 2, 2, ["hardware.pipeline_parallel=2"]),
        ({"dp": 4, "moe_ep": 8}, 8, 1, ["hardware.attention_dp=4", "hardware.moe_mapping=ep"]),
        ({"ep": 2, "moe_tp": 1}, 2, 1, ["hardware.moe_mapping=ep"]),
        ({"pp": float("nan"), "ep": ""}, 2, 1, []),  # empty cells
    ],
)
def test_parallelism_columns_map_to_the_design(extra, chips, stages, more):
    from decodelab.runs.validation import base_overrides

    ov = base_overrides(_row(**extra))
    assert f"hardware.tensor_parallel={chips}" in ov and f"hardware.n_chips={chips * stages}" in ov
    assert [
        o
        for o in ov
        if o.split("=")[0] in ("hardware.pipeline_parallel", "hardware.attention_dp", "hardware.moe_mapping")
    ] == more


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"ep": 4}, "ep=4 must be tp x dp = 2"),
        ({"pp": 0}, "pp=0 must be"),
        ({"moe_tp": 1}, "ep=1 must be tp x dp = 2"),
    ],
)
def test_parallelism_the_model_cannot_map_is_one_error(tmp_path, extra, words):
    row = {**_row(**extra).to_dict(), "isl": 128, "osl": 8, "concurrency": 1, "ttft_ms": 1, "tpot_ms": 1}
    csv = tmp_path / "rows.csv"
    pd.DataFrame([row]).to_csv(csv, index=False)
    r = cli(tmp_path, "validate", "--no-track", "--csv", str(csv))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("error:")]
    assert "data row 1" in line and words in line


@pytest.mark.parametrize(
    "hardware, engine, tp, budget, reserve_gib",
    [
        # SGLang 0.5.1 (server_args.py:353-415): 8192 tokens, 9.5 + tp / 2 GiB below 90 GiB of GPU memory
        ("h100_sxm", "sglang", 2, 8192, 9.5 + 2 / 2),
        ("h200_sxm", "sglang", 4, 8192, 12 + 4 / 2),  # 12 + tp / 2 below 160 GiB
        ("b200_sxm", "sglang", 2, 16384, 32.0),  # 16384 tokens and 32 GiB from 160 GiB up
        # SGLang 0.5.8: 512 MiB + 1.5 x chunk MiB + 2 x cuda_graph_max_bs MiB + tp / 8 GiB
        ("h100_sxm", "sglang_0_5_8", 1, 8192, (512 + 1.5 * 8192 + 2 * 256) / 1024 + 1 / 8),
        ("h100_sxm", "sglang_0_5_8", 4, 8192, (512 + 1.5 * 8192 + 2 * 512) / 1024 + 4 / 8),
        ("gb200", "sglang_0_5_8", 2, 16384, (512 + 1.5 * 16384 + 2 * 512) / 1024 + 2 / 8),
        ("a100_sxm", "vllm", 1, 2048, None),  # vLLM on an A100: 2048 tokens, 256 sequences
        ("h100_sxm", "vllm", 1, 8192, None),
    ],
)
def test_engine_defaults_follow_the_chip(hardware, engine, tp, budget, reserve_gib):
    """By hand from the engines' sources: the step budget and (SGLang) the KV pool, the HBM less
    the weights and the reserve mem_fraction_static leaves, for the run's chip and TP."""
    cfg = compose_cfg(
        f"hardware={hardware}",
        f"hardware.n_chips={tp}",
        f"engine={engine}",
        "model=llama3_1_8b",
        "workload=closed_loop",
    )
    assert cfg.engine.max_tokens_per_step == budget and cfg.engine.chunk_size == budget
    if engine == "vllm":
        assert cfg.engine.max_batch == (256 if hardware == "a100_sxm" else 1024)
        return
    design = build(cfg)
    gib = 2.0**30
    hbm = cfg.hardware.memory.hbm.capacity_gib
    expect = (hbm - reserve_gib) * gib - design.weights_chip
    assert design.memory["kv_pool_bytes"] == pytest.approx(expect, rel=1e-9)


def test_engine_default_by_chip_yields_to_an_override():
    cfg = compose_cfg("hardware=b200_sxm", "engine=sglang", "engine.max_tokens_per_step=4096")
    assert cfg.engine.max_tokens_per_step == 4096 and cfg.engine.chunk_size == 16384


@pytest.mark.parametrize(
    "call, value",
    [
        (("below", 50, 35, 1, 90, 2, 3), 2),
        (("below", 10, 35, 1, 3), 1),
        (("below", 200, 35, 1, 3), 3),
        (("contains", "dgx_a100", "A100", 1, 2), 1),
    ],
)
def test_chip_resolvers(call, value):
    from decodelab.config import schema

    assert getattr(schema, call[0])(*call[1:]) == value
    with pytest.raises(ValueError, match="needs thresholds and values"):
        schema.below(1, 2, 3)


def test_a_precision_naming_mxfp4_activations_sets_the_engines_moe_rows():
    """AIConfigurator's gpt-oss quant modes name the experts' activations: w4a16_mxfp4 and
    w4a8_mxfp4_mxfp8 set engine.moe_mxfp4 (which measured MoE rows cost the experts); plain mxfp4
    leaves the engine file's choice for the chip."""
    row = pd.Series(dict(model="openai/gpt-oss-120b", engine="trtllm", engine_version="1.0.0rc3", tp=1))
    for prec, want in (("w4a16_mxfp4", "w4a16"), ("w4a8_mxfp4_mxfp8", "w4a8")):
        got = base_overrides(pd.concat([row, pd.Series(dict(precision=prec))]))
        assert f"engine.moe_mxfp4={want}" in got and "workload.weight_dtype=mxfp4" in got
    plain = base_overrides(pd.concat([row, pd.Series(dict(precision="mxfp4"))]))
    assert not any(o.startswith("engine.moe_mxfp4=") for o in plain)
