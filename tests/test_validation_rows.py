"""How `decodelab validate` maps a measured row to a design (docs/validation.md "The
CSV"): checkpoint names to model configs, `system` to hardware configs,
`precision` to weight / KV dtypes; and the hardware configs whose operator laws were fitted to
other chips' operator microbenchmarks (H200, B200)."""

import math

import pytest
from decodelab.config import compose as C
from decodelab.core.checks import DTYPE_BYTES
from decodelab.runs.validation import (
    PRECISIONS,
    base_overrides,
    hardware_config_name,
    model_config_name,
    run_validation,
)


@pytest.mark.parametrize(
    "model, name",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_1_8b"),
        ("meta-llama/Meta-Llama-3.1-8B", "llama3_1_8b"),  # old checkpoint name
        ("Qwen/Qwen3-32B", "qwen3_32b"),
        ("Qwen/Qwen3-32B-FP8", "qwen3_32b"),  # quantized checkpoint: same shapes
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama3_1_70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama3_3_70b"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral_8x7b"),  # release tag
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_30b_a3b"),
        ("Qwen/Qwen3-235B-A22B-FP8", "qwen3_235b_a22b"),
        ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek_r1"),
        ("openai/gpt-oss-120b", "gpt_oss_120b"),
    ],
)
def test_checkpoint_names_map_to_model_configs(model, name):
    assert model_config_name(model) == name


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"'foo/Bar-7B' has no config in conf/model/ \(known: .*qwen3_8b"):
        model_config_name("foo/Bar-7B")


@pytest.mark.parametrize(
    "system, name",
    [
        ("h100_sxm", "h100_sxm"),
        ("H200", "h200_sxm"),
        ("NVIDIA H200", "h200_sxm"),
        ("b200_sxm", "b200_sxm"),
        ("GB200", "gb200"),
        ("NVIDIA GB200", "gb200"),
        ("b300_sxm", "b300_sxm"),
        ("NVIDIA B300", "b300_sxm"),
        ("b300-sxm", "b300_sxm"),
        ("gb300", "gb300"),
        ("GB300", "gb300"),
        ("NVIDIA GB300", "gb300"),
    ],
)
def test_system_column_maps_to_hardware_configs(system, name):
    assert hardware_config_name(system) == name


def test_unknown_system_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"system 'tpu_v5' has no config in conf/hardware/ \(known: .*h200_sxm"
    ):
        hardware_config_name("tpu_v5")


def test_every_precision_maps_to_known_dtypes():
    for prec, (w, kv) in PRECISIONS.items():
        assert w in DTYPE_BYTES and kv in DTYPE_BYTES, prec
    assert PRECISIONS["nvfp4"] == ("nvfp4", "fp8")  # ModelOpt NVFP4 checkpoints keep an FP8 KV cache
    assert PRECISIONS["fp8_block"] == ("fp8_block", "fp8")


def test_row_overrides_name_system_and_dtypes():
    row = {
        "model": "Qwen/Qwen3-8B",
        "engine": "vllm",
        "engine_version": "0.12.0",
        "precision": "nvfp4",
        "tp": 2,
        "system": "B200",
    }
    o = base_overrides(row)
    assert "model=qwen3_8b" in o and "engine=vllm" in o and "hardware=b200_sxm" in o
    assert "hardware.tensor_parallel=2" in o
    assert "workload.weight_dtype=nvfp4" in o and "workload.kv_dtype=fp8" in o


def _hw(name):
    return C.compose(["tracking=off", f"hardware={name}"]).hardware


def test_h200_shares_the_h100_die_and_differs_in_memory():
    h100, h200 = _hw("h100_sxm"), _hw("h200_sxm")
    assert h200.peak_tflops_bf16 == h100.peak_tflops_bf16 and h200.peak_tflops_fp8 == h100.peak_tflops_fp8
    assert h200.memory.hbm.bandwidth_gb_s == 4800 and h200.memory.hbm.capacity_gib == pytest.approx(139.8)
    assert h200.link_bw_gb_s == h100.link_bw_gb_s  # NVLink4 on both


def test_fitted_laws_of_other_chips_are_physical():
    """Fitted to each chip's own operator microbenchmarks (AIConfigurator, TensorRT-LLM 1.2.0rc5): the
    GEMM efficiencies are fractions of that chip's peaks; the same GH100 die gives H200 a BF16 compute
    efficiency within a few points of H100's."""
    for name in ("h200_sxm", "b200_sxm"):
        hw = _hw(name)
        assert hw.op_model == "fitted"
        for dt in ("bf16", "fp8"):
            g = hw.op_fit.gemm[dt]
            assert 0.4 < g.e_c < 1.0 and 0.6 < g.e_b < 1.0 and g.t0_us > 0, (name, dt)
        assert set(hw.op_fit.all_reduce) == {"tp2", "tp4", "tp8"}
    h100, h200 = _hw("h100_sxm"), _hw("h200_sxm")
    assert abs(h200.op_fit.gemm.bf16.e_c - h100.op_fit.gemm.bf16.e_c) < 0.06


@pytest.mark.slow
def test_rows_on_other_chips_and_models_run(tmp_path):
    """A CSV with a `system` column, another model family and an FP4 precision predicts every row;
    memory-bound decode is faster on more bandwidth (B200 > H200 > H100 > A100 for the same row)."""
    head = "model,engine,engine_version,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms,system\n"
    rows = [
        f"meta-llama/Llama-3.1-8B-Instruct,trtllm,1.0.0rc3,bf16,1,1024,64,4,100,8,{s}\n"
        for s in ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm")
    ]
    rows.append("Qwen/Qwen3-30B-A3B-FP8,trtllm,1.0.0rc3,fp8,2,1024,64,4,100,8,h200_sxm\n")
    rows.append("Qwen/Qwen3-235B-A22B,trtllm,1.0.0rc3,nvfp4,4,1024,64,4,100,8,b200_sxm\n")
    rows += [
        f"Qwen/Qwen3-32B,trtllm,1.3.0rc10,fp8,1,1024,64,1,50,10,{s}\n" for s in ("gb200", "b300_sxm", "gb300")
    ]
    p = tmp_path / "rows.csv"
    p.write_text(head + "".join(rows))
    df = run_validation(p)
    assert list(df.status) == ["ok"] * 9
    tpot = list(df.tpot_pred[:4])
    assert tpot[0] > tpot[1] > tpot[2] > tpot[3] > 0
    assert all(math.isfinite(x) and x > 0 for x in df.ttft_pred)


def test_a_tp_copy_is_the_config_hydra_composes():
    """validate composes once per design without its TP and copies it per TP degree: the copy equals
    the config Hydra composes with the TP overrides (and an override of the user's wins)."""
    from decodelab.runs.validation_predict import composed as _composed
    from omegaconf import OmegaConf

    row = {
        "model": "Qwen/Qwen3-32B",
        "engine": "vllm",
        "engine_version": "0.12.0",
        "precision": "bf16",
        "tp": 4,
    }
    key = tuple(base_overrides(row))
    with C.context():
        cache = {}
        got = _composed(cache, key, [])
        want = C.compose_in_context(["tracking=off", *key])
        assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(want, resolve=True)
        row2 = dict(row, tp=2)
        _composed(cache, tuple(base_overrides(row2)), [])
        assert len([k for k in cache if k[0] == "compose"]) == 1  # one composition for both TPs
        pinned = _composed({}, key, ["hardware.tensor_parallel=2"])
        assert pinned.hardware.tensor_parallel == 2 and pinned.hardware.n_chips == 4


def test_fp8_rows_follow_the_published_checkpoint():
    """`fp8` means the model's published FP8 checkpoint: block-scaled for Qwen3 (and DeepSeek), so its
    GEMMs are fp8_block; per-tensor (NVIDIA ModelOpt) otherwise."""
    q = {
        "model": "Qwen/Qwen3-32B",
        "engine": "trtllm",
        "engine_version": "1.0.0rc3",
        "precision": "fp8",
        "tp": 2,
    }
    assert "workload.weight_dtype=fp8_block" in base_overrides(q)
    ll = dict(q, model="meta-llama/Llama-3.1-70B-Instruct")
    assert "workload.weight_dtype=fp8" in base_overrides(ll)
    assert "workload.weight_dtype=fp8_block" in base_overrides(dict(ll, precision="fp8_block"))


def test_bad_fp8_checkpoint_is_one_line():
    from decodelab.modes.dispatch import evaluate

    r = evaluate(C.compose(["tracking=off", "model.fp8_checkpoint=channel"]))
    assert r["status"] == "invalid" and "model.fp8_checkpoint" in r["reason"] and "block" in r["reason"]


@pytest.mark.slow
def test_validate_all_runs_every_shipped_csv(tmp_path):
    """`decodelab validate --all`: every shipped CSV in one process (the 396 rows; docs/sweeps.md,
    "Benchmarks"), one table each; with --csv it is one error line."""
    from conftest import cli

    out = cli(tmp_path, "validate", "--all", "--no-track")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("mean absolute percentage error") == 2
    assert "over 42 rows" in out.stdout and "over 354 rows" in out.stdout
    assert out.stdout.count("output tok/s") == 2 and "tok/s bias" in out.stdout
    bad = cli(tmp_path, "validate", "--all", "--csv", "x.csv", "--no-track")
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "--all" in bad.stderr


def test_output_rate_by_littles_law_by_hand():
    """The output rate a row's TTFT and TPOT imply (runs/validation_steps.output_rate): 8 clients,
    osl 101: a request every 1000 + 100 x 10 = 2000 ms per client, so 8 x 101 tokens per 2 s = 404
    tok/s measured; predicted TTFT 500 ms and TPOT 11 ms: 1600 ms, 505 tok/s, +25%. The summary's
    tok/s MAPE and bias are those of the rows' rates; a row without a prediction is not counted."""
    from decodelab.runs.validation import summary
    from decodelab.runs.validation_predict import record
    from decodelab.runs.validation_steps import output_rate

    row = dict(
        model="m",
        engine="vllm",
        engine_version="",
        precision="bf16",
        tp=2,
        concurrency=8,
        isl=1024,
        osl=101,
        ttft_ms=1000.0,
        tpot_ms=10.0,
    )
    assert output_rate(8, 101, 1000.0, 10.0) == pytest.approx(404.0, rel=1e-12)
    key = ("ok", "engine=vllm")
    rec = record(row, key, {"status": "ok", "reason": "", "metrics": {"ttft_ms": 500.0, "tpot_ms": 11.0}})
    assert rec["tput_meas"] == pytest.approx(404.0) and rec["tput_pred"] == pytest.approx(505.0)
    assert rec["tput_err_pct"] == pytest.approx(25.0)
    # a second row, 20% slow on both: -1/6 of the rate; a third without a prediction
    slow = record(row, key, {"status": "ok", "reason": "", "metrics": {"ttft_ms": 1200.0, "tpot_ms": 12.0}})
    none = record(row, key, {"status": "infeasible", "reason": "x", "metrics": {}})
    assert slow["tput_err_pct"] == pytest.approx(-100.0 / 6.0) and math.isnan(none["tput_err_pct"])
    import pandas as pd

    s = summary(pd.DataFrame([rec, slow, none]), groups=()).iloc[0]
    assert s["tput_mape"] == pytest.approx((25.0 + 100.0 / 6.0) / 2)
    assert s["tput_bias"] == pytest.approx((25.0 - 100.0 / 6.0) / 2)
    assert s["tput_worst_x"] == pytest.approx(1.25)


@pytest.mark.slow
def test_aiconfigurator_schema_and_rows_the_model_cannot_express(tmp_path):
    """A CSV in AIConfigurator's own column names (silicon_sample.csv's, as its tools read them)
    runs; a disaggregated row and a row of a model without a config are recorded with their reason,
    not predicted, and do not stop the other rows."""
    head = (
        "id,model_path,system,backend,backend_version,mode,isl,osl,gemm_quant_mode,moe_quant_mode,"
        "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_tp_size,"
        "decode_tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
    )
    rows = [
        "a,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,trtllm,1.0.0rc3,agg,256,8,bfloat16,,2,1,1,1,1,1,,,50,7\n",
        "b,Qwen/Qwen3-30B-A3B,h200_sxm,vllm,0.12.0,agg,256,8,bfloat16,fp8,2,2,1,1,2,1,,,50,7\n",
        "c,Qwen/Qwen3-32B,h100_sxm,trtllm,1.0.0rc3,disagg,256,8,fp8,,,,,,,,1,1,50,7\n",
        "d,foo/Bar-7B,h100_sxm,vllm,0.12.0,agg,256,8,bfloat16,,2,1,1,1,1,1,,,50,7\n",
    ]
    p = tmp_path / "silicon.csv"
    p.write_text(head + "".join(rows))
    df = run_validation(p)
    assert list(df.status) == ["ok", "ok", "invalid", "invalid"]
    assert list(df.precision) == ["bfloat16", "fp8", "fp8", "bfloat16"]  # moe_quant_mode where given
    assert list(df.concurrency[:2]) == [2, 2] and list(df.tp[:2]) == [1, 2]  # batch_size, tp_size
    assert "mode=disagg" in df.reason[2] and "'foo/Bar-7B' has no config" in df.reason[3]
    assert df.tpot_pred[:2].notna().all() and df.tpot_pred[2:].isna().all()


def test_a_csv_no_row_of_which_maps_is_one_error(tmp_path):
    p = tmp_path / "rows.csv"
    p.write_text(
        "model,engine,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
        "foo/Bar-7B,vllm,bf16,1,256,8,2,50,7\nfoo/Baz-7B,vllm,bf16,1,256,8,2,50,7\n"
    )
    with pytest.raises(ValueError, match=r"rows.csv data row 1: model 'foo/Bar-7B' has no config"):
        run_validation(p)
