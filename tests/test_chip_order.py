"""The chips with their own measured operator tables against each other and against older chips
(each file's own sourced figures: tests/test_gb200.py, test_b300.py, test_gb300.py): a memory-bound
decode on a Blackwell chip is faster than on an H100; a model too large for the smaller-memory chip
of a generation fits on the larger one; every chip's tables are used as measured (not rescaled); and
the Blackwell chips' tables (MoE included) load, with their collectives at the GPU counts measured."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from decodelab.api import evaluate
from decodelab.opcost import attention_decode, collectives, gemm, moe_blocks

DECODE = (
    "tracking=off",
    "workload=decode",
    "workload.batch_size=1",
    "workload.prompt_len=1024",
    "workload.output_len=128",
    "workload.kv_dtype=fp8",
)


@pytest.mark.parametrize("chip", ["gb200", "b300_sxm", "gb300"])
def test_decode_is_faster_than_on_h100(chip):
    design = (*DECODE, "model=qwen3_32b", "workload.weight_dtype=fp8_block")
    tpot = {}
    for name in ("h100_sxm", chip):
        r = evaluate(*design, f"hardware={name}")
        assert r.status == "ok", r.reason
        tpot[name] = r.metrics["tpot_ms"]
    assert 0 < tpot[chip] < tpot["h100_sxm"]


@pytest.mark.parametrize("chip, smaller", [("b300_sxm", "b200_sxm"), ("gb300", "gb200")])
def test_holds_a_model_the_smaller_chip_cannot(chip, smaller):
    """Qwen3-235B-A22B in FP8: ~220 GiB of weights, more than a B200's 178.35 or a GB200's 184.31 GiB
    of HBM, less than a B300's 268.6 or a GB300's 277.5 GiB."""
    design = (*DECODE, "model=qwen3_235b_a22b", "workload.weight_dtype=fp8")
    assert evaluate(*design, f"hardware={smaller}").status == "infeasible"
    r = evaluate(*design, f"hardware={chip}")
    assert r.status == "ok", r.reason
    assert r.metrics["tpot_ms"] > 0


@pytest.mark.parametrize("chip", ["h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300"])
def test_own_tables_are_not_rescaled(chip):
    """A chip's own tables were measured on it: the rates they were measured at are the chip's, so
    their times are used as measured (opcost/gemm.py rescales only a chip that inherits them)."""
    hw = compose_cfg(f"hardware={chip}").hardware
    assert hw.op_tables.hbm_gb_s == hw.memory.hbm.bandwidth_gb_s
    assert hw.op_tables.peak_tflops_bf16 == hw.peak_tflops_bf16
    assert hw.op_tables.peak_tflops_fp8 == hw.peak_tflops_fp8


@pytest.mark.parametrize("chip, gpus", [("gb200", {2, 4}), ("b300_sxm", {2, 4, 8}), ("gb300", {2, 4})])
def test_own_tables_and_fitted_laws(chip, gpus):
    """Every table is a <chip>_* file that loads (MoE blocks included, Qwen3-30B-A3B's in each);
    the laws are fitted (GEMM efficiencies are fractions of the chip's peaks); collectives hold the
    GPU counts the measured tables do (gb200 and gb300: 2 and 4, their 4-GPU nodes; TP8 there keeps
    the roofline law), and the sampler's law is the B200's, said so."""
    hw = compose_cfg(f"hardware={chip}").hardware
    t = hw.op_tables
    assert hw.op_model == "fitted"
    gemms = [t.gemm, *t.gemm_by_engine.values()]
    ar = list(t.all_reduce_by_engine.values())
    attn = [t.attention_decode, *t.attention_decode_by_engine.values()]
    moes = [t.moe, *t.moe_by_engine.values()]
    engines = {"vllm", "sglang"}
    assert set(t.gemm_by_engine) == set(t.all_reduce_by_engine) == set(t.moe_by_engine) == engines
    for path in gemms + ar + attn + moes:
        assert path.startswith(f"operators/{chip}_"), path
    for path in gemms:
        assert gemm.problem(path) is None
    for path in ar:
        assert collectives.problem(path) is None
        assert set(collectives.collective_curves(path)) == gpus
    for path in attn:
        assert attention_decode.problem(path) is None
    for path in moes:
        assert moe_blocks.problem(path) is None
        # Qwen3-30B-A3B's block (hidden 2048, expert FFN 768, top-8 of 128), BF16, one GPU
        assert moe_blocks.block_row(path, "bf16", (2048, 768, 8, 128, 1, 1)) is not None, path
    for dt in ("bf16", "fp8", "fp8_block"):
        g = hw.op_fit.gemm[dt]
        assert 0.4 < g.e_c < 1.0 and 0.5 < g.e_b < 1.0 and g.t0_us > 0, dt
    for law in hw.op_fit.attention_decode.values():
        assert 0 < law.bw_kv_tbs <= hw.memory.hbm.bandwidth_gb_s / 1000
    tps = {f"tp{n}" for n in gpus}
    assert set(hw.op_fit.all_reduce) == set(hw.op_fit.all_gather) == tps
    assert all(set(laws) == tps for laws in hw.op_fit.all_reduce_by_engine.values())
    assert hw.op_fit.sampler.sort.caveat  # the B200's law, said so in every run that uses it
