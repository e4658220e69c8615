"""Each engine release's kernel tables (hardware.op_tables.by_version, framework/opcost/versions.py): which listed
release a design's engine.version reads, that its ops then cost that release's measured rows, and how validate
names a row's release. Every expected time is a row of a shipped table, as AIConfigurator measured it
(tools/aic_chip_tables.py --releases)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import compose_cfg
from decodelab.core.build import build
from decodelab.core.reference import cost_context
from decodelab.errors import ConfigError
from decodelab.opcost import registry
from decodelab.opcost.base import Step, op_table
from decodelab.opcost.versions import nearest, release
from decodelab.paths import DATA_DIR
from decodelab.runs import aic_rows
from decodelab.runs.validation import base_overrides, row_release

H200_VLLM = ("model=qwen3_32b", "hardware=h200_sxm", "engine=vllm_0_19", "tracking=off")


@pytest.mark.parametrize(
    "version, listed, expected",
    [
        ("0.18.0", ["0.14.0", "0.18.0", "0.19.0"], "0.18.0"),  # its own
        ("0.18.0", ["0.14.0", "0.19.0"], "0.19.0"),  # minor 1 after, not 4 before
        ("0.16.0", ["0.14.0", "0.18.0"], "0.14.0"),  # 2 either side: the earlier
        ("0.12.0", ["0.14.0", "0.19.0"], "0.14.0"),  # before every listed one: the first
        ("0.24.0", ["0.14.0", "0.19.0"], "0.19.0"),  # after every one: the last
        ("0.5.1.post1", ["0.5.6.post2", "0.5.9"], "0.5.6.post2"),
        ("0.5.8.post1", ["0.5.6.post2", "0.5.9"], "0.5.9"),  # micro 1 after, 2 before
        ("1.3.0rc1", ["1.2.0rc5", "1.3.0rc10"], "1.3.0rc10"),  # same release, another pre-release
        ("1.2.0rc6.post2", ["1.2.0rc5", "1.3.0rc10"], "1.2.0rc5"),
    ],
)
def test_the_nearest_listed_release(version, listed, expected):
    assert nearest(version, listed) == expected


def test_a_version_that_is_no_release_is_one_error_line():
    assert release("") is None
    with pytest.raises(ConfigError, match=r"^engine.version='nightly' is not a release version \(PEP 440"):
        release("nightly")


def test_each_kind_reads_the_release_that_lists_it():
    """H200: vLLM lists 0.14.0 (its default), 0.18.0 and 0.19.0; SGLang 0.5.6.post2 (no MoE: its rows are
    power-law only) and 0.5.9 (its default)."""
    hw = compose_cfg(*H200_VLLM).hardware
    ops = "operators/h200_sxm_"
    assert op_table(hw, "gemm", "vllm") == ops + "gemm_vllm_0.14.0.parquet"  # no release named
    assert op_table(hw, "gemm", "vllm", "0.18.0") == ops + "gemm_vllm_0.18.0.parquet"
    assert op_table(hw, "moe", "vllm", "0.17.0") == ops + "moe_vllm_0.18.0.parquet"
    assert (
        op_table(hw, "attention_decode", "vllm", "0.16.0") == ops + "generation_attention_vllm_0.14.0.parquet"
    )
    assert (
        op_table(hw, "mla_decode", "sglang", "0.5.1.post1")
        == ops + "generation_mla_sglang_0.5.6.post2.parquet"
    )
    assert op_table(hw, "moe", "sglang", "0.5.6.post2") == ops + "moe_sglang_0.5.9.parquet"
    assert op_table(hw, "gemm", "trtllm", "1.2.0rc6") == ""  # no release list: no table of its own
    assert op_table(hw, "gemm", "", "0.18.0") == ops + "gemm_trtllm_1.2.0rc5.parquet"  # the chip's


def _o_proj_us(*overrides) -> float:
    """Qwen3-32B's o_proj (BF16, n 5120, k 8192) at 32 tokens on its path, us."""
    cfg = compose_cfg(*H200_VLLM, *overrides)
    ctx = cost_context(cfg)
    op = next(op for op in build(cfg).ops if op.name == "o_proj")
    assert (op.gemm_n, op.gemm_k) == (5120, 8192)
    t, t0, _ = registry.reference(op, ctx, registry.prices(op, ctx), Step(32))
    return (t + t0) * 1e6


def test_a_gemm_costs_its_releases_row():
    """The m = 32 rows of the three H200 vLLM tables at (5120, 8192), BF16: 26.965 (0.14.0), 26.324 (0.18.0),
    27.098 us (0.19.0); 0.16.0 reads 0.14.0's."""
    rows = {}
    for v in ("0.14.0", "0.18.0", "0.19.0"):
        d = pd.read_parquet(DATA_DIR / "operators" / f"h200_sxm_gemm_vllm_{v}.parquet")
        d = d[(d.gemm_dtype == "bfloat16") & (d.m == 32) & (d.n == 5120) & (d.k == 8192)]
        rows[v] = float(d.latency_ms.iloc[0]) * 1e3
    assert rows == pytest.approx({"0.14.0": 26.965, "0.18.0": 26.324, "0.19.0": 27.098}, abs=1e-3)
    assert _o_proj_us("engine.version=") == pytest.approx(rows["0.14.0"], rel=1e-6)  # no release: the default
    assert _o_proj_us() == pytest.approx(rows["0.19.0"], rel=1e-6)  # vllm_0_19's own, its newest
    assert _o_proj_us("engine.version=0.18.0") == pytest.approx(rows["0.18.0"], rel=1e-6)
    assert _o_proj_us("engine.version=0.19.0") == pytest.approx(rows["0.19.0"], rel=1e-6)
    assert _o_proj_us("engine.version=0.16.0") == pytest.approx(rows["0.14.0"], rel=1e-6)


def test_a_release_moe_table_carries_the_borrowed_kernels():
    """vLLM's Marlin rows come from its 0.24.0 collection into the default table (tools/aic_moe_kernel_convert.py
    BORROWS); each release table of the same engine holds them as the default does."""
    d14 = pd.read_parquet(DATA_DIR / "operators" / "h200_sxm_moe_vllm_0.14.0.parquet")
    d18 = pd.read_parquet(DATA_DIR / "operators" / "h200_sxm_moe_vllm_0.18.0.parquet")
    kernel = "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"
    a, b = d14[d14.kernel_source == kernel], d18[d18.kernel_source == kernel]
    assert len(a) > 0 and a.reset_index(drop=True).equals(b[a.columns].reset_index(drop=True))
    assert "vllm_marlin_moe" not in set(d18.kernel_source)  # 0.14.0's own legacy rows stay its own


def test_a_bad_release_list_is_one_line_each():
    from decodelab.opcost.base import check_releases
    from omegaconf import open_dict

    hw = compose_cfg(*H200_VLLM).hardware
    with open_dict(hw):
        listed = hw.op_tables.by_version.vllm
        listed["latest"] = {"gemm": "operators/h200_sxm_gemm_vllm_0.18.0.parquet"}
        listed["0.18.0"]["kv"] = "operators/h200_sxm_gemm_vllm_0.18.0.parquet"
    assert check_releases(hw) == [
        "hardware.op_tables.by_version.vllm.0.18.0.kv: not one of: gemm, attention_decode, mla_decode, moe",
        "hardware.op_tables.by_version.vllm.latest: 'latest' is not a release version (PEP 440, e.g. 0.18.0 or 1.2.0rc6)",
    ]


def test_a_table_of_ones_own_stands_for_every_release():
    """A user's own `gemm_by_engine` table (not one of the listed releases') is read at every release."""
    own = "operators/h200_sxm_gemm_trtllm_1.2.0rc5.parquet"  # a table no release lists
    hw = compose_cfg(*H200_VLLM, f"hardware.op_tables.gemm_by_engine.vllm={own}").hardware
    assert op_table(hw, "gemm", "vllm", "0.18.0") == own and op_table(hw, "gemm", "vllm") == own
    assert (
        op_table(hw, "moe", "vllm", "0.18.0") == "operators/h200_sxm_moe_vllm_0.18.0.parquet"
    )  # other kinds: as listed
    hw = compose_cfg(*H200_VLLM, "hardware.op_tables.gemm_by_engine.vllm=").hardware
    assert op_table(hw, "gemm", "vllm", "0.18.0") == ""  # none of its own: the chip's at every release


@pytest.mark.parametrize(
    "version, source, expected",
    [
        ("0.18.0", "source_file=2026-03-25.csv; image=vllm/vllm-openai:v0.18.0", "0.18.0"),
        ("1.2.0rc6.post2", "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post2", "1.2.0rc6.post2"),
        # the rows of a Dynamo dump record the runtime image's version, not the engine's
        ("0.8.1.post3", "workflow_run_id=269; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post3", ""),
        ("0.8.1", "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post3", "0.8.1"),
        (
            "0.5.6.post2",
            "image=nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.8.0; dynamo_version=0.8.0",
            "0.5.6.post2",
        ),
        (
            "nightly-5b8c30d62b754b57",
            "image=vllm/vllm-openai:nightly-5b8c30d62b754b57",
            "nightly-5b8c30d62b754b57",
        ),
    ],
)
def test_an_aic_rows_engine_release(version, source, expected):
    assert aic_rows.engine_release({"backend_version": version, "silicon_data_source": source}) == expected


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"engine_version": "0.5.1.post1"}, "0.5.1.post1"),  # a shipped CSV's row
        ({"engine_version": "0.8.1.post3", "engine_release": ""}, ""),  # a Dynamo dump's row
        ({"engine_version": "nightly-5b8c30d62b754b57", "engine_release": "nightly-5b8c30d62b754b57"}, ""),
        ({"engine_version": "gpt-oss-dev"}, ""),
        ({"engine_version": float("nan")}, ""),
    ],
)
def test_a_rows_release(row, expected):
    assert row_release(row) == expected


def test_validate_names_the_rows_release_in_its_design():
    row = {
        "model": "Qwen/Qwen3-32B",
        "engine": "vllm",
        "engine_version": "0.18.0",
        "precision": "fp8",
        "tp": 1,
    }
    row.update(system="h200_sxm", isl=1024, osl=1024, concurrency=4)
    assert "engine.version=0.18.0" in base_overrides(pd.Series(row))


def test_a_design_notes_the_releases_it_reads():
    """The design's note names the release tables its engine release reads, per kind."""
    from decodelab.opcost.base import release_note

    ctx = cost_context(compose_cfg(*H200_VLLM, "engine.version=0.17.0"))
    assert release_note(ctx) == "vllm 0.17.0 reads release tables 0.18.0 (gemm, attention_decode, moe)"
    ctx = cost_context(compose_cfg(*H200_VLLM[:2], "engine=sglang", "tracking=off"))
    assert release_note(ctx) == (
        "sglang 0.5.1.post1 reads release tables 0.5.6.post2 (gemm, attention_decode, mla_decode), 0.5.9 (moe)"
    )
    assert release_note(cost_context(compose_cfg(*H200_VLLM, "engine.version="))) is None
    assert (
        release_note(cost_context(compose_cfg("hardware=b200_sxm", "engine=vllm_0_19"))) is None
    )  # none listed
