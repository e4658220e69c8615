"""Monotonicity and no-op invariants of the performance model over several models and machines.

Each property compares two evaluations of designs that differ in one knob; hypothesis draws the
base design (model x machine) and the workload."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.components.execution import gpu
from decodelab.core.build import build
from decodelab.modes.dispatch import evaluate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

GPU_BASES = [
    ("llama3_1_8b", "h100_sxm"),
    ("llama2_7b", "a100_sxm"),
    ("llama3_1_70b", "dgx_h100"),
    ("qwen2_5_72b", "dgx_a100"),
    ("llama3_2_1b", "dgx_h100"),
]
DATAFLOW_BASES = [
    ("llama3_1_8b", "sn40l_socket"),
    ("llama3_1_70b", "sn40l_socket"),
    ("llama3_1_70b", "sn40l_node8"),
    ("llama3_1_405b", "sn40l_rack16"),
    ("qwen2_5_0_5b", "sn40l_socket"),
    ("llama3_2_3b", "sn40l_node8"),
]
BASES = GPU_BASES + DATAFLOW_BASES

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
TOL = 1e-12  # relative slack for "never slower" (floating-point reassociation only)


def _cfg(base, opt="default", batch=1, prompt=1024, output=8):
    model, hardware = base
    cfg = compose_cfg(f"model={model}", f"hardware={hardware}", f"optimizations={opt}")
    cfg.workload.batch_size = batch
    cfg.workload.prompt_len = prompt
    cfg.workload.output_len = output
    return cfg


def _ok(cfg):
    res = evaluate(cfg, keep_steps=False)
    assume(res["status"] == "ok")
    return res["metrics"]


def _ok_strict(cfg):
    res = evaluate(cfg, keep_steps=False)
    assert res["status"] == "ok", res["reason"]
    return res["metrics"]


def _not_slower(new, old):
    assert new["tpot_ms"] <= old["tpot_ms"] * (1 + TOL), (new["tpot_ms"], old["tpot_ms"])
    assert new["ttft_ms"] <= old["ttft_ms"] * (1 + TOL), (new["ttft_ms"], old["ttft_ms"])


batches = st.integers(1, 64)
prompts = st.integers(1, 4000)  # llama2_7b: prompt + output <= 4096


# ---- (a) memory bandwidth, (b) link bandwidth ------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(BASES),
    opt=st.sampled_from(["none", "default", "all"]),
    batch=batches,
    prompt=prompts,
    factor=st.floats(1.01, 8.0),
)
def test_more_hbm_bandwidth_never_slower(base, opt, batch, prompt, factor):
    cfg = _cfg(base, opt, batch, prompt)
    old = _ok(cfg)
    cfg.hardware.memory.hbm.bandwidth_gb_s *= factor
    new = _ok_strict(cfg)
    _not_slower(new, old)
    # the memory-roofline part of the step never grows (calls may turn compute-bound)
    assert new["tpot_memory_ms"] <= old["tpot_memory_ms"] * (1 + TOL)
    assert new["ttft_memory_ms"] <= old["ttft_memory_ms"] * (1 + TOL)


@pytest.mark.slow
@SETTINGS
@given(base=st.sampled_from(DATAFLOW_BASES), batch=batches, prompt=prompts, factor=st.floats(1.01, 8.0))
def test_more_ddr_bandwidth_never_slower(base, batch, prompt, factor):
    cfg = _cfg(base, "default", batch, prompt)
    old = _ok(cfg)
    cfg.hardware.memory.ddr.bandwidth_gb_s *= factor
    _not_slower(_ok_strict(cfg), old)


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(BASES),
    opt=st.sampled_from(["none", "default", "all"]),
    batch=batches,
    prompt=prompts,
    factor=st.floats(1.01, 8.0),
)
def test_more_link_bandwidth_never_slower(base, opt, batch, prompt, factor):
    cfg = _cfg(base, opt, batch, prompt)
    old = _ok(cfg)
    cfg.hardware.link_bw_gb_s *= factor
    new = _ok_strict(cfg)
    _not_slower(new, old)
    if cfg.hardware.tensor_parallel == 1:
        # no collectives on one chip: nothing changes at all
        assert new["tpot_ms"] == old["tpot_ms"] and new["ttft_ms"] == old["ttft_ms"]


def test_link_bandwidth_matters_for_tensor_parallel_gpu():
    # at a large batch the all-reduce bytes are visible: 4x the link is strictly faster
    # (the roofline law's link; under op_model=fitted the all-reduce has its own fitted beta)
    slow = _cfg(("llama3_1_70b", "dgx_h100"), "default", 64, 1024)
    slow.hardware.op_model = "roofline"
    fast = _cfg(("llama3_1_70b", "dgx_h100"), "default", 64, 1024)
    fast.hardware.op_model = "roofline"
    fast.hardware.link_bw_gb_s *= 4
    a, b = _ok_strict(slow), _ok_strict(fast)
    assert b["tpot_collectives_ms"] < a["tpot_collectives_ms"]
    assert b["ttft_ms"] < a["ttft_ms"]


# ---- (c) optimizations that apply never make a design slower ---------------------------------


@pytest.mark.slow
@SETTINGS
@given(base=st.sampled_from(GPU_BASES), batch=batches, prompt=prompts)
def test_cuda_graphs_never_slower_on_gpu(base, batch, prompt):
    off = _cfg(base, "none", batch, prompt)
    on = _cfg(base, "none", batch, prompt)
    on.optimizations.cuda_graphs = True
    m_off, m_on = _ok(off), _ok_strict(on)
    _not_slower(m_on, m_off)
    # at most one host dispatch (engine.eager_launch_us, else launch_us) saved per kernel call:
    # launches are asynchronous, so a graph saves only the part the step's kernels do not hide
    most_ms = m_off["n_kernel_calls_per_step"] * gpu.eager_dispatch_us(off.hardware, off.engine) * 1e-3
    for key in ("tpot_ms", "ttft_ms"):
        assert 0 <= m_off[key] - m_on[key] <= most_ms * (1 + 1e-9)


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(DATAFLOW_BASES),
    batch=batches,
    prompt=prompts,
    orchestration=st.sampled_from(["software", "hardware"]),
)
def test_kernel_looping_never_slower_on_dataflow(base, batch, prompt, orchestration):
    off = _cfg(base, "default", batch, prompt)
    off.optimizations.fusion = "layer"
    off.optimizations.orchestration = orchestration
    on = off.copy()
    on.optimizations.kernel_looping = True
    m_off, m_on = _ok(off), _ok_strict(on)
    _not_slower(m_on, m_off)
    # launch + fill/drain of the fused layer call paid once per step instead of n_layers times (a software
    # call repeating the loaded layer program costs repeat_launch_us, < 0: launch_us)
    hw = off.hardware
    again = hw.repeat_launch_us if hw.repeat_launch_us >= 0 else hw.launch_us
    launch = hw.hw_launch_us if orchestration == "hardware" else again
    saved_ms = (off.model.n_layers - 1) * (launch + hw.fill_drain_us) * 1e-3
    assert m_off["tpot_ms"] - m_on["tpot_ms"] == pytest.approx(saved_ms, rel=1e-6)


@pytest.mark.slow
@SETTINGS
@given(base=st.sampled_from(DATAFLOW_BASES), batch=batches, prompt=prompts)
def test_batch_streaming_never_slower_on_dataflow(base, batch, prompt):
    off = _cfg(base, "all", batch, prompt)
    off.optimizations.batch_streaming = False
    on = off.copy()
    on.optimizations.batch_streaming = True
    m_off, m_on = _ok(off), _ok_strict(on)
    _not_slower(m_on, m_off)
    # the batch barrier of every layer shrinks from (B - 1) to max(0, B - slots) sample intervals
    hw = off.hardware
    waits = (batch - 1) - max(0, batch - hw.loop_buffer_slots)
    saved_ms = off.model.n_layers * waits * hw.sample_interval_us * 1e-3
    assert m_off["tpot_ms"] - m_on["tpot_ms"] == pytest.approx(saved_ms, rel=1e-6, abs=1e-12)


@SETTINGS
@given(
    base=st.sampled_from(DATAFLOW_BASES),
    batch=batches,
    prompt=prompts,
    fusion=st.sampled_from(["none", "layer"]),
)
def test_hardware_orchestration_never_slower_on_dataflow(base, batch, prompt, fusion):
    sw = _cfg(base, "default", batch, prompt)
    sw.optimizations.fusion = fusion
    sw.optimizations.orchestration = "software"
    hw_ = sw.copy()
    hw_.optimizations.orchestration = "hardware"
    assert hw_.hardware.hw_launch_us < hw_.hardware.launch_us
    m_sw, m_hw = _ok(sw), _ok_strict(hw_)
    _not_slower(m_hw, m_sw)
    assert m_hw["tpot_launch_sync_ms"] < m_sw["tpot_launch_sync_ms"]


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(DATAFLOW_BASES),
    batch=batches,
    prompt=prompts,
    orchestration=st.sampled_from(["software", "hardware"]),
)
def test_layer_fusion_never_slower_than_none_on_dataflow(base, batch, prompt, orchestration):
    none = _cfg(base, "none", batch, prompt)
    none.optimizations.orchestration = orchestration
    layer = none.copy()
    layer.optimizations.fusion = "layer"
    m_none, m_layer = _ok(none), _ok_strict(layer)
    _not_slower(m_layer, m_none)
    assert m_layer["n_kernel_calls_per_step"] == none.model.n_layers + 2  # layers + pre + post
    assert m_layer["n_kernel_calls_per_step"] < m_none["n_kernel_calls_per_step"]


@pytest.mark.slow
@SETTINGS
@given(base=st.sampled_from(DATAFLOW_BASES), batch=batches, prompt=prompts, m_steps=st.integers(2, 40))
def test_schedule_offloading_never_slower_on_dataflow(base, batch, prompt, m_steps):
    one = _cfg(base, "default", batch, prompt)
    many = one.copy()
    many.optimizations.schedule_offloading = m_steps
    m_one, m_many = _ok(one), _ok_strict(many)
    _not_slower(m_many, m_one)
    assert m_many["tpot_host_ms"] == pytest.approx(m_one["tpot_host_ms"] / m_steps, rel=1e-9)


# ---- (d) context and (e) batch -------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(BASES),
    opt=st.sampled_from(["none", "default", "all"]),
    batch=batches,
    p1=prompts,
    extra=st.integers(1, 4000),
)
def test_longer_prompt_never_lowers_tpot(base, opt, batch, p1, extra):
    short = _cfg(base, opt, batch, p1)
    long_ = _cfg(base, opt, batch, min(p1 + extra, 4088))
    assume(long_.workload.prompt_len > p1)
    m_short = _ok(short)
    m_long = _ok(long_)
    assert m_long["tpot_ms"] >= m_short["tpot_ms"] * (1 - TOL)
    assert m_long["ttft_ms"] >= m_short["ttft_ms"] * (1 - TOL)


def _kv_in_ddr(cfg) -> float:
    d = build(cfg)
    return dict(zip(d.tier_names, d.memory["kv_frac"])).get("ddr", 0.0)


@pytest.mark.slow
@SETTINGS
@given(
    base=st.sampled_from(BASES),
    opt=st.sampled_from(["none", "default", "all"]),
    b1=batches,
    extra=st.integers(1, 64),
    prompt=prompts,
)
def test_larger_batch_more_aggregate_less_per_user(base, opt, b1, extra, prompt):
    small = _cfg(base, opt, b1, prompt)
    big = _cfg(base, opt, b1 + extra, prompt)
    m_small = _ok(small)
    m_big = _ok(big)
    # Only while the KV cache stays in HBM: once it spills into the 100 GB/s DDR of an SN40L
    # socket, every extra sequence streams its KV from DDR and aggregate tok/s falls (by design).
    assume(_kv_in_ddr(big) == 0.0)
    assert m_big["tok_s_aggregate"] >= m_small["tok_s_aggregate"] * (1 - TOL)
    assert m_big["tok_s_user"] <= m_small["tok_s_user"] * (1 + TOL)


# ---- (f) an optimization that does not apply: same result plus a note ------------------------

NOT_APPLICABLE = [
    (
        "llama3_1_8b",
        "h100_sxm",
        "optimizations.kernel_looping",
        True,
        "kernel_looping does not apply to gpu execution",
    ),
    (
        "llama3_1_70b",
        "dgx_h100",
        "optimizations.orchestration",
        "hardware",
        "orchestration=hardware does not apply to gpu execution",
    ),
    (
        "llama3_1_8b",
        "a100_sxm",
        "optimizations.fusion",
        "layer",
        "fusion=layer does not apply to gpu execution",
    ),
    (
        "llama3_1_8b",
        "h100_sxm",
        "optimizations.schedule_offloading",
        20,
        "schedule_offloading does not apply to gpu execution",
    ),
    (
        "llama3_1_70b",
        "sn40l_rack16",
        "optimizations.cuda_graphs",
        True,
        "cuda_graphs does not apply to dataflow execution",
    ),
    (
        "llama3_1_8b",
        "sn40l_socket",
        "optimizations.cuda_graphs",
        True,
        "cuda_graphs does not apply to dataflow execution",
    ),
]


@pytest.mark.parametrize("model, hardware, key, value, note", NOT_APPLICABLE)
@pytest.mark.parametrize("batch, prompt", [(1, 4096), (16, 512)])
def test_inapplicable_optimization_is_a_noop_with_a_note(model, hardware, key, value, note, batch, prompt):
    base = _cfg((model, hardware), "none", batch, prompt, output=16)
    group, field = key.split(".")
    other = base.copy()
    setattr(other.optimizations, field, value)
    r0, r1 = evaluate(base), evaluate(other)
    assert r0["status"] == r1["status"] == "ok"
    assert r1["metrics"] == r0["metrics"]
    assert (r1["times"] == r0["times"]).all()
    assert not any(note in n for n in r0["notes"])
    assert sum(note in n for n in r1["notes"]) == 1, r1["notes"]
    assert any(n.endswith("ignored") for n in r1["notes"])


def test_kernel_looping_without_fusion_is_a_noop_with_a_note():
    base = _cfg(("llama3_1_8b", "sn40l_socket"), "none", 1, 1024)  # fusion=none
    other = base.copy()
    other.optimizations.kernel_looping = True
    r0, r1 = evaluate(base), evaluate(other)
    assert r1["metrics"] == r0["metrics"]
    assert any("kernel_looping needs fusion=layer" in n for n in r1["notes"])


def test_kernel_looping_reports_one_layer_call():
    cfg = _cfg(("llama3_1_8b", "sn40l_socket"), "default", 1, 1024)
    cfg.optimizations.kernel_looping = True
    assert _ok_strict(cfg)["n_kernel_calls_per_step"] == 3
