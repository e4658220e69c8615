"""MLA's absorbed decode BMMs from measured tables (hardware.op_tables.mla_bmm and mla_bmm_by_engine, shipped from
AIConfigurator's mla_bmm_perf by tools/aic_kernel_tables.py; framework/opcost/mla_bmm.py): the shipped rows
reproduced at a DeepSeek-V3 design's own heads and dtype, the engine's own table, the ops that keep the roofline,
a bad table, and the kernel against the reference."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import assert_steps_match_reference, compose_cfg
from decodelab.core.build import build
from decodelab.kernel_layout import Law, Lin
from decodelab.opcost import mla_bmm, registry, tables
from decodelab.paths import DATA_DIR

OPS = DATA_DIR / "operators"
TP8 = ("model=deepseek_v3", "hardware.n_chips=8", "hardware.tensor_parallel=8")


def _meas(path, role, dtype, heads, tokens):
    df = pd.read_parquet(path)
    x = df[(df.role == role) & (df.bmm_dtype == dtype) & (df.num_heads == heads) & (df.num_tokens == tokens)]
    return float(x.latency_ms.median()) * 1e-3


def _op(name, *ov):
    d = build(compose_cfg(*TP8, *ov))
    i = next(j for j, op in enumerate(d.ops) if op.name == name)
    return d, i


def _at(d, i, tokens):
    """The op's seconds at `tokens` decode tokens from its kernel columns (t0 + the tabulated rest)."""
    lin = d.op_lin[i]
    tab = lin[Lin.TAB : Lin.TAB + len(tables.M_GRID)]
    return lin[Lin.T0] + float(tables.table_time(0.0, tab, tokens))


@pytest.mark.parametrize(
    "name, role, weights, dtype, chip, us16",
    [
        ("q_absorb", "pre", "fp8_block", "fp8", "h200_sxm", 7.38),
        ("v_absorb", "post", "fp8_block", "fp8", "h200_sxm", 7.54),
        ("q_absorb", "pre", "bf16", "bfloat16", "b200_sxm", 4.28),
    ],
)
def test_deepseek_v3_bmm_is_the_measured_row(name, role, weights, dtype, chip, us16):
    """DeepSeek-V3 at TP8 (16 heads per GPU): a block-FP8 checkpoint's BMMs run in FP8, on an H200 TensorRT-LLM
    1.3.0rc20's q_nope x W_UK 7.38 us at 16 decode tokens (the roofline law charged 3.3 us), a BF16 one's in BF16
    (4.28 us on a B200); at 16 and 64 tokens the op is the table's own row."""
    d, i = _op(name, f"hardware={chip}", "engine=default", f"workload.weight_dtype={weights}")
    assert d.op_lin[i, Lin.LAW] == Law.GEMM and d.op_lin[i, Lin.G_TAB] == 1.0
    path = OPS / f"{chip}_mla_bmm_trtllm.parquet"
    assert _meas(path, role, dtype, 16, 16) * 1e6 == pytest.approx(us16, abs=0.01)
    for tokens in (16, 64):
        assert _at(d, i, tokens) == pytest.approx(_meas(path, role, dtype, 16, tokens), rel=0.1)


def test_sglang_reads_its_own_table():
    d, i = _op("q_absorb", "hardware=b200_sxm", "engine=sglang", "workload.weight_dtype=fp8_block")
    own = OPS / "b200_sxm_mla_bmm_sglang.parquet"
    assert _at(d, i, 64) == pytest.approx(_meas(own, "pre", "fp8", 16, 64), rel=0.1)


def test_other_dims_keep_the_roofline():
    """A model whose MLA dims differ from the tables' (128 nope, 512 latent, 128 v) carries no BMM shape."""
    cfg = compose_cfg(*TP8, "hardware=h200_sxm", "model.kv_lora_rank=256", "workload.weight_dtype=fp8_block")
    op = next(op for op in build(cfg).ops if op.name == "q_absorb")
    assert op.mla_bmm == () and not mla_bmm.matches(op)


def test_a_bad_table_is_one_error_line(tmp_path):
    bad = tmp_path / "bmm.csv"
    pd.DataFrame({"role": ["pre"], "num_tokens": [1], "latency_ms": [0.01]}).to_csv(bad, index=False)
    hw = compose_cfg("hardware=h200_sxm", f"hardware.op_tables.mla_bmm={bad}").hardware
    got = [e for e in registry.check(hw) if "op_tables.mla_bmm" in e]
    assert len(got) == 1 and "misses column(s) bmm_dtype, num_heads" in got[0]


@pytest.mark.parametrize("engine", ["default", "sglang"])
def test_kernel_matches_reference_with_the_bmm_table(engine):
    cfg = compose_cfg(*TP8, "hardware=h200_sxm", "workload.weight_dtype=fp8_block", f"engine={engine}")
    assert_steps_match_reference(cfg, 24, 3000, 4, 3)


def test_nvfp4_checkpoints_keep_bf16_bmms():
    """NVIDIA's NVFP4 DeepSeek-R1 keeps its attention projections in BF16 (model.quant_bf16_ops, q_absorb and
    v_absorb among them): its BMMs read the BF16 rows, as AIConfigurator's model takes the kv projection's dtype.
    SGLang on a B200: 4.29 us at 16 tokens, not its FP8 path's 6.85."""
    d, i = _op(
        "q_absorb", "hardware=b200_sxm", "engine=sglang", "model=deepseek_r1", "workload.weight_dtype=nvfp4"
    )
    own = OPS / "b200_sxm_mla_bmm_sglang.parquet"
    assert _meas(own, "pre", "bfloat16", 16, 16) * 1e6 == pytest.approx(4.29, abs=0.01)
    assert _meas(own, "pre", "fp8", 16, 16) * 1e6 == pytest.approx(6.85, abs=0.01)
    assert _at(d, i, 16) == pytest.approx(_meas(own, "pre", "bfloat16", 16, 16), rel=0.1)
