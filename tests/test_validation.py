"""Bad input: `evaluate` records it as `invalid` (bad config) or `infeasible` (a valid design that
cannot run) with one line per problem naming the field, the offending value and what is allowed;
Hydra's schema rejects unknown fields and wrong types at composition; the CLI prints `error:`
lines and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, compose_raw
from decodelab.modes.dispatch import evaluate
from hydra.errors import ConfigCompositionException

MAIN = Path(__file__).resolve().parent.parent

# (overrides, status, fragments that the single reason line must contain)
CASES = [
    pytest.param(
        ["hardware=dgx_h100", "hardware.tensor_parallel=3"],
        "infeasible",
        ["tensor_parallel=3 does not divide n_heads=32 of llama3_1_8b"],
        id="tp3-heads",
    ),
    pytest.param(
        ["model=qwen2_5_0_5b", "hardware=dgx_h100", "hardware.tensor_parallel=7"],
        "infeasible",
        ["tensor_parallel=7 does not divide kv_heads=2 of qwen2_5_0_5b"],
        id="tp7-kv-heads",
    ),
    pytest.param(
        ["model=llama2_7b", "hardware=dgx_h100", "model.ffn_dim=11004"],
        "infeasible",
        ["tensor_parallel=8 does not divide ffn_dim=11004 of llama2_7b"],
        id="tp8-ffn",
    ),
    pytest.param(["workload.batch_size=0"], "invalid", ["workload.batch_size=0", "must be > 0"], id="batch0"),
    pytest.param(
        ["workload.prompt_len=-5"], "invalid", ["workload.prompt_len=-5", "must be > 0"], id="prompt-negative"
    ),
    pytest.param(
        ["workload.output_len=1"], "invalid", ["workload.output_len=1", "must be >= 2"], id="output1"
    ),
    pytest.param(
        ["workload.weight_dtype=fp7"],
        "invalid",
        ["workload.weight_dtype='fp7' is not one of:", "fp32", "bf16", "fp16", "fp8", "int8", "int4"],
        id="fp7",
    ),
    pytest.param(
        ["workload.kv_dtype=fp64"],
        "invalid",
        ["workload.kv_dtype='fp64' is not one of:", "bf16", "fp8"],
        id="kv-fp64",
    ),
    pytest.param(
        ["hardware.execution=tpu"],
        "invalid",
        ["hardware.execution='tpu' is not one of:", "gpu", "dataflow"],
        id="tpu",
    ),
    pytest.param(
        ["optimizations.fusion=bogus"],
        "invalid",
        ["optimizations.fusion='bogus' is not one of:", "auto", "none", "layer"],
        id="fusion",
    ),
    pytest.param(
        ["optimizations.orchestration=magic"],
        "invalid",
        ["optimizations.orchestration='magic' is not one of:", "software", "hardware"],
        id="orchestration",
    ),
    pytest.param(
        ["optimizations.schedule_offloading=0"],
        "invalid",
        ["optimizations.schedule_offloading=0", "must be >= 1"],
        id="schedule-offloading",
    ),
    pytest.param(
        ["model.arch=moe"],
        "invalid",
        ["model.n_experts=0 must be >= 1 for arch=moe", "llama3_1_8b"],
        id="moe",
    ),
    pytest.param(
        ["model.arch=transformer"],
        "invalid",
        ["model.arch='transformer' is not one of:", "dense", "moe", "mla", "hybrid"],
        id="arch-unknown",
    ),
    pytest.param(
        ["model.n_kv_heads=5"],
        "invalid",
        ["model.n_kv_heads=5 does not divide model.n_heads=32"],
        id="kv-heads-5",
    ),
    pytest.param(
        ["model.ffn_act=relu"],
        "invalid",
        ["model.ffn_act='relu' is not one of:", "swiglu", "gelu"],
        id="relu",
    ),
    pytest.param(["model.vocab_size=0"], "invalid", ["model.vocab_size=0", "must be > 0"], id="vocab0"),
    pytest.param(
        ["hardware.tensor_parallel=2"],
        "invalid",
        ["hardware.tensor_parallel=2 exceeds hardware.n_chips=1 of h100_sxm"],
        id="tp>chips",
    ),
    pytest.param(
        ["hardware=dgx_h100", "hardware.tensor_parallel=16"],
        "invalid",
        ["hardware.tensor_parallel=16 exceeds hardware.n_chips=8 of dgx_h100"],
        id="tp16>8",
    ),
    pytest.param(
        ["workload.prompt_len=200000"],
        "infeasible",
        ["prompt_len + output_len = 200128", "max_context=131072", "llama3_1_8b"],
        id="too-long",
    ),
    pytest.param(
        ["model=llama2_7b", "workload.prompt_len=4000", "workload.output_len=97"],
        "infeasible",
        ["prompt_len + output_len = 4097", "max_context=4096"],
        id="llama2-4k",
    ),
    pytest.param(
        ["hardware.memory.hbm.capacity_gib=0"],
        "invalid",
        ["hardware.memory.hbm needs", "capacity_gib > 0", "got 0.0 and 3350.0"],
        id="tier-capacity0",
    ),
    pytest.param(
        ["hardware=sn40l_socket", "hardware.memory.ddr.bandwidth_gb_s=-100"],
        "invalid",
        ["hardware.memory.ddr needs", "bandwidth_gb_s > 0", "got 1536.0 and -100.0"],
        id="ddr-bw-negative",
    ),
    pytest.param(["hardware.bw_eff_max=1.5"], "invalid", ["hardware.bw_eff_max=1.5", "(0, 1]"], id="bw-eff"),
    pytest.param(
        ["hardware.compute_eff_max=0"],
        "invalid",
        ["hardware.compute_eff_max=0.0", "(0, 1]"],
        id="compute-eff0",
    ),
    pytest.param(
        ["hardware.launch_us=-1"],
        "invalid",
        ["hardware.launch_us=-1.0", "must be >= 0"],
        id="launch-negative",
    ),
    pytest.param(
        ["hardware.peak_tflops_bf16=0"],
        "invalid",
        ["hardware.peak_tflops_bf16=0.0", "must be > 0"],
        id="peak0",
    ),
    pytest.param(
        ["hardware=dgx_h100", "hardware.link_bw_gb_s=0"],
        "invalid",
        ["hardware.link_bw_gb_s=0.0", "tensor_parallel=8"],
        id="link0",
    ),
    pytest.param(
        ["kv_policy.name=unknown"],
        "invalid",
        ["kv_policy.name='unknown' is not one of:", "full"],
        id="kv-policy",
    ),
    pytest.param(
        ["model=llama3_1_405b", "hardware=dgx_h100"],
        "infeasible",
        ["does not fit memory", "needs 94.5 GiB weights", "hbm 79.2 GiB"],
        id="405b-dgx",
    ),
    pytest.param(
        ["workload.batch_size=4096", "workload.prompt_len=8192"],
        "infeasible",
        ["does not fit memory", "GiB KV per chip"],
        id="kv-too-big",
    ),
    pytest.param(
        ["speculative=draft", "speculative.k=0"], "invalid", ["speculative.k=0", "must be >= 1"], id="spec-k0"
    ),
    pytest.param(
        ["speculative=draft", "speculative.acceptance=1.5"],
        "invalid",
        ["speculative.acceptance=1.5", "[0, 1]"],
        id="spec-acceptance",
    ),
]


@pytest.mark.parametrize("overrides, status, fragments", CASES)
def test_bad_input_is_recorded_with_one_line_reason(compose, overrides, status, fragments):
    res = evaluate(compose(*overrides))
    assert res["status"] == status, res
    reason = res["reason"]
    assert reason and "\n" not in reason, reason
    for frag in fragments:
        assert frag in reason, (frag, reason)
    assert res["metrics"] == {}
    assert "Traceback" not in reason


def test_several_problems_give_one_line_each(compose):
    res = evaluate(
        compose(
            "workload.batch_size=0",
            "workload.prompt_len=-3",
            "hardware.execution=tpu",
            "hardware.bw_eff_max=2",
        )
    )
    assert res["status"] == "invalid"
    lines = res["reason"].splitlines()
    assert len(lines) == 4
    assert sorted(line.split("=")[0] for line in lines) == sorted(
        ["hardware.execution", "hardware.bw_eff_max", "workload.batch_size", "workload.prompt_len"]
    )
    assert any(line.startswith("workload.batch_size=0 ") for line in lines)
    assert any(line.startswith("workload.prompt_len=-3 ") for line in lines)


def test_zero_chips_reports_both_fields(compose):
    # tensor_parallel defaults to ${.n_chips}, so both are 0: one line for each
    res = evaluate(compose("hardware.n_chips=0"))
    assert res["status"] == "invalid"
    lines = res["reason"].splitlines()
    assert "hardware.n_chips=0 must be > 0" in lines
    assert "hardware.tensor_parallel=0 must be > 0" in lines


def test_missing_hbm_tier(compose):
    from omegaconf import open_dict

    cfg = compose()
    with open_dict(cfg):
        cfg.hardware.memory["vram"] = cfg.hardware.memory.pop("hbm")  # a tier renamed
    res = evaluate(cfg)
    assert res["status"] == "invalid"
    lines = res["reason"].splitlines()
    assert len(lines) == 2  # two problems: no hbm tier; 'vram' is not a tier name
    assert any("no 'hbm' tier" in line and "(tiers: vram)" in line for line in lines)
    assert any(
        line.startswith("hardware.memory.vram is not a memory tier; tiers: sram, hbm, ddr, host")
        for line in lines
    )


@pytest.mark.parametrize("field", ["host_step_us", "bw_half_mb"])
def test_nan_overhead_is_invalid(compose, field):
    res = evaluate(compose(f"hardware.{field}=nan"))
    assert res["status"] == "invalid"
    assert res["reason"] == f"hardware.{field}: not a finite number (nan and inf are refused); give a number"


# ---- Hydra's schema: unknown fields and wrong types fail at composition ----------------------


def _chain(exc: BaseException) -> str:
    msgs = []
    while exc is not None:
        msgs.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(msgs)


def test_unknown_field_override_fails_at_composition():
    with pytest.raises(ConfigCompositionException) as ei:
        compose_raw("model.foo=1")
    assert "Could not override 'model.foo'" in _chain(ei.value)
    assert "Key 'foo' not in 'ModelConfig'" in _chain(ei.value)


def test_unknown_field_append_is_invalid():
    # Hydra's `+` append opens the typed node, so composition succeeds; validation catches it
    res = evaluate(compose_raw("+model.foo=1"))
    assert res["status"] == "invalid"
    assert res["reason"].splitlines()[0].startswith("model.foo is not a field of model; fields:")


@pytest.mark.parametrize(
    "override, complaint",
    [
        ("workload.batch_size=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
        ("hardware.launch_us=fast", "Value 'fast' of type 'str' could not be converted to Float"),
        ("optimizations.cuda_graphs=maybe", "Value 'maybe' is not a valid bool"),
    ],
)
def test_wrong_type_fails_at_composition(override, complaint):
    with pytest.raises(ConfigCompositionException) as ei:
        compose_raw(override)
    text = _chain(ei.value)
    assert f"Error merging override {override}" in text
    assert complaint in text


def test_unknown_field_in_a_group_file_fails(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "typo.yaml").write_text(
        "name: typo\nn_layers: 2\nd_model: 64\nn_heads: 4\nn_kv_heads: 4\nhead_dim: 16\n"
        "ffn_dim: 128\nvocab_size: 100\nn_kv_head: 4\n"
    )  # n_kv_head: a typo
    with pytest.raises(ConfigCompositionException) as ei:
        compose_raw(f"hydra.searchpath=[file://{tmp_path}]", "model=typo")
    assert "Key 'n_kv_head' not in 'ModelConfig'" in _chain(ei.value)


def test_unknown_group_option_lists_the_choices():
    with pytest.raises(Exception) as ei:
        compose_raw("model=gpt5")
    text = str(ei.value)
    assert "Could not find 'model/gpt5'" in text
    assert "llama3_1_8b" in text and "qwen2_5_72b" in text


# ---- the CLI: one `error:` line per problem, exit status 2, no traceback ---------------------


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["workload.batch_size=0"], ["error: workload.batch_size=0"]),
        (
            ["workload.batch_size=0", "hardware.execution=tpu"],
            ["error: hardware.execution='tpu'", "error: workload.batch_size=0"],
        ),
    ],
)
def test_cli_invalid_input_exits_2(tmp_path, overrides, expected):
    proc = cli(tmp_path, *overrides, "tracking=off")  # in this process
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err_lines) == len(expected), proc.stderr
    for prefix in expected:
        assert any(ln.startswith(prefix) for ln in err_lines), (prefix, proc.stderr)
