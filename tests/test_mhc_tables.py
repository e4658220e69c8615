"""DeepSeek-V4's hyper-connection mixing from the engines' measured tables (framework/opcost/mhc.py): V4-Flash's 4
streams of 4,096 at TP8 on a B200. A table row times two sites (the attention's and the FFN's sublayer), an op one:
every expected time below is half a row of the shipped table as AIConfigurator measured it (tools/aic_kernel_tables.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import assert_serve_matches_reference, compose_cfg
from decodelab.core.build import build
from decodelab.core.reference import cost_context
from decodelab.opcost import mhc, registry
from decodelab.opcost.base import Step

FLASH = ("model=deepseek_v4_flash", "hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
FLASH += ("tracking=off",)


def _ops(*overrides):
    cfg = compose_cfg(*overrides)
    return {op.name: op for op in build(cfg).ops if op.mhc}, cost_context(cfg)


def _ms(op, ctx, tokens: float) -> float:
    t, t0, _ = registry.reference(op, ctx, registry.prices(op, ctx), Step(tokens))
    return (t + t0) * 1e3


def test_a_site_is_half_the_engines_row():
    """vLLM 0.24.0: pre 0.0373 ms and post 0.0316 ms at 1,024 tokens for two sites (18.65 / 15.8 us a site); at 64
    tokens pre 0.0192. TensorRT-LLM 1.3.0rc20's pre at 1,024 tokens: 0.0534 (26.7 us a site)."""
    ops, ctx = _ops(*FLASH, "engine=vllm_0_19")
    assert ops["hc_pre"].mhc == ("pre", 4, 4096) and ops["hc_pre"].repeat == 2 * 43
    assert [p.family for p in registry.prices(ops["hc_pre"], ctx)] == ["mhc"]
    assert _ms(ops["hc_pre"], ctx, 1024) == pytest.approx(0.0373 / 2, rel=1e-9)
    assert _ms(ops["hc_post"], ctx, 1024) == pytest.approx(0.0316 / 2, rel=1e-9)
    assert _ms(ops["hc_pre"], ctx, 64) == pytest.approx(0.0192 / 2, rel=1e-9)
    trt, ctx_t = _ops(*FLASH, "engine=trtllm_inferencex")
    assert _ms(trt["hc_pre"], ctx_t, 1024) == pytest.approx(0.0534 / 2, rel=1e-9)


def test_a_shape_no_table_holds_keeps_the_roofline():
    ops, ctx = _ops(*FLASH, "engine=vllm_0_19", "model.hc_mult=2")
    assert registry.prices(ops["hc_pre"], ctx) == ()
    assert "hc_pre (no op_tables.mhc pre row at hc_mult 2, hidden 4096)" in registry.note(
        list(ops.values()), ctx
    )


def test_a_bad_table_is_one_error_line(tmp_path):
    bad = tmp_path / "m.csv"
    pd.DataFrame({"role": ["pre"], "num_tokens": [1], "latency_ms": [0.1]}).to_csv(bad, index=False)
    hw = compose_cfg("hardware=b200_sxm", f"hardware.op_tables.mhc={bad}").hardware
    assert registry.check(hw) == [
        f"hardware.op_tables.mhc: {bad}: not a hyper-connection table (misses column(s) hc_mult, hidden_size, "
        "num_sites)"
    ]


@pytest.mark.parametrize(
    "chip", ["h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "l40s", "rtx_pro_6000_server"]
)
def test_every_chip_reads_its_tables(chip):
    """Each table holds V4-Flash's and V4-Pro's streams (4 x 4,096 and 4 x 7,168), both roles."""
    t = compose_cfg(f"hardware={chip}").hardware.op_tables
    assert t.mhc == t.mhc_by_engine.trtllm
    for path in t.mhc_by_engine.values():
        assert {("pre", 4, 4096), ("post", 4, 4096), ("pre", 4, 7168), ("post", 4, 7168)} <= set(
            mhc.curves(path)
        )


def test_serving_matches_the_reference_with_the_tables():
    cfg = compose_cfg(
        *FLASH, "engine=sglang_0_5_8", "workload=closed_loop", "workload.concurrency=4",
        "workload.prompt_len=600", "workload.output_len=10",
    )  # fmt: skip
    assert len(assert_serve_matches_reference(cfg)) > 0
