"""DeepSeek-V4's compressed attention (components/models/csa.py): parameter counts against the model
card, the cache bytes and their read model worked by hand, the serving kernel's window and top-k
shares against its reference, the importer against the shipped files, one validate row per engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_aic_rows_run, assert_import_matches_shipped, compose_cfg
from decodelab.components.kv_policy import KV_POLICIES
from decodelab.components.models import ARCHITECTURES, csa, layers
from decodelab.components.speculative import mtp_draft
from decodelab.core.build import build
from decodelab.core.kv_costs import effective_tokens, read_model
from decodelab.errors import ConfigError
from decodelab.modes.serving import parts
from decodelab.modes.serving.layout import Eng
from decodelab.modes.serving.reference_parts import read_and_pairs

HF = Path(__file__).parent / "data" / "hf_configs"
# Flash: 2 window-only layers, 21 of ratio 4 (indexer), 20 of ratio 128
ENTRY, INDEX = 584.0, 132.0  # fp8_ds_mla: 448 FP8 + 7 scales + 1 pad + 64 x 2; index key 128 + 4
PER_TOKEN = 43 * ENTRY + 21 * (ENTRY + INDEX) / 4 + 20 * ENTRY / 128  # 25,112 + 3,759 + 91.25


def flash():
    return compose_cfg("model=deepseek_v4_flash").model


def test_parameters_match_the_model_cards():
    """Model card: V4-Flash 284B total / 13B activated, V4-Pro 1.6T / 49B (1.6T with its MTP layer)."""
    p = layers.param_counts(flash())
    assert p["total"] / 1e9 == pytest.approx(284.33, abs=0.01)
    assert (p["active"] - p["embed"]) / 1e9 == pytest.approx(13.27, abs=0.01)
    q = layers.param_counts(compose_cfg("model=deepseek_v4_pro").model)
    assert q["total"] / 1e9 == pytest.approx(1573.0, abs=0.1)
    assert (q["total"] + q["mtp"]) / 1e12 == pytest.approx(1.60, abs=0.01)
    assert (q["active"] - q["embed"]) / 1e9 == pytest.approx(48.9, abs=0.1)


def test_cache_bytes_per_token_by_hand():
    m = flash()
    assert csa.entry_bytes(m, 1.0) == ENTRY
    assert csa.entry_bytes(m, 2.0) == 1024.0  # BF16: 512 x 2
    assert csa.compressed_bytes(m, 1.0) == pytest.approx(3850.25)
    assert layers.kv_bytes_per_token(m, 1.0) == pytest.approx(PER_TOKEN)  # 28,962.25
    mix = layers.kv_layer_mix(m, 1.0)
    assert mix["sliding"] == pytest.approx(43 * ENTRY / PER_TOKEN)
    assert mix["sparse"] == pytest.approx(21 * ENTRY / 4 / PER_TOKEN)
    assert (mix["window"], mix["topk"]) == (128.0, 2048.0)


def test_decode_read_at_8k_by_hand():
    """At 8,192 tokens a decode step reads per sequence: the windows 43 x 128 x 584 = 3,214,336 B, the
    ratio-4 layers' top-512 entries 21 x 512 x 584 = 6,279,168, their index keys 21 x 2,048 x 132 =
    5,677,056, the ratio-128 layers' 64 entries 20 x 64 x 584 = 747,520: 15,918,080 B."""
    cfg = compose_cfg("model=deepseek_v4_flash", "workload.kv_dtype=fp8")
    rm = read_model(KV_POLICIES["full"], cfg.kv_policy, ARCHITECTURES["csa"], cfg.model, 1.0)
    caps = np.zeros(8)
    x = effective_tokens(np.array([8192.0]), caps, rm)[0]
    assert x * PER_TOKEN == pytest.approx(15_918_080.0)


def test_serving_kernel_reads_window_and_top_k_as_the_reference():
    """Both shares at once (Eng.SLIDE / WINDOW and Eng.SPARSE / TOPK) in the kernel's helpers and the
    pure-Python reference: reads and causal pairs of a decode row and of a prefill chunk."""
    m = flash()
    mix = layers.kv_layer_mix(m, 1.0)
    eng = np.zeros(Eng.size)
    eng[Eng.SLIDE], eng[Eng.WINDOW], eng[Eng.SLIDE_MEM] = mix["sliding"], mix["window"], -1.0
    eng[Eng.SPARSE], eng[Eng.TOPK] = mix["sparse"], mix["topk"]
    ref = {
        "slide": mix["sliding"],
        "window": 128.0,
        "slide_mem": -1.0,
        "sparse": mix["sparse"],
        "topk": 2048.0,
    }
    for q, a in ((1.0, 8192.0), (1.0, 100.0), (1024.0, 1024.0), (4096.0, 8192.0)):
        read, pairs = read_and_pairs(q, a, ref)
        assert parts.read_tokens(q, a, eng) == pytest.approx(read)
        assert parts.layer_pairs(q, a, eng) == pytest.approx(pairs)
    assert parts.read_tokens(1.0, 8192.0, eng) * PER_TOKEN == pytest.approx(15_918_080.0)
    # the pool holds the window only for the window's share, every token for the rest
    held = 8192 * (1 - mix["sliding"]) + 128 * mix["sliding"]
    assert parts.mem_tokens(8192.0, eng) == pytest.approx(held)


def test_compressor_states_per_sequence_by_hand():
    """fp32 rows of 2 coff head_dim, coff x ratio of them: ratio 4 (coff 2): 8 x 8 KiB; its index
    keys' (128 wide): 8 x 2 KiB; ratio 128: 128 x 4 KiB. Flash: 21 x 80 KiB + 20 x 512 KiB."""
    ops = csa.compressor_ops(flash(), 1.0)
    state = sum(op.state_bytes_per_seq * op.repeat for op in ops)
    assert state == (21 * (64 + 16) + 20 * 512) * 1024
    writes = sum(op.kv_write_per_token * op.repeat for op in ops)
    assert writes == pytest.approx(csa.compressed_bytes(flash(), 1.0))


def test_kv_bytes_per_chip_equal_the_writes():
    d = build(
        compose_cfg(
            "model=deepseek_v4_flash",
            "hardware=dgx_h100",
            "workload.weight_dtype=mxfp4",
            "workload.kv_dtype=fp8",
        )
    )
    assert sum(op.kv_write_per_token * op.repeat for op in d.ops) == pytest.approx(PER_TOKEN)


def test_output_groups_must_split_over_the_chips():
    with pytest.raises(ConfigError, match="o_groups=4 must be a multiple"):
        build(compose_cfg("model=deepseek_v4_flash", "hardware=dgx_h100", "model.o_groups=4"))


def test_mtp_layer_attends_with_its_own_entry():
    pro = compose_cfg("model=deepseek_v4_pro").model
    assert csa.ratios(pro)[:2] == [128, 128]
    assert mtp_draft(pro)["compress_ratios"] == [0]  # config.json's 62nd entry: the window only


@pytest.mark.parametrize("name", ["flash", "pro"])
def test_import_equals_the_shipped_file(name):
    assert_import_matches_shipped(HF / f"DeepSeek-V4-{name.title()}.json", f"deepseek_v4_{name}", arch="csa")


def test_rows_run_under_each_engine(tmp_path):
    rows = [
        "a,vllm,0.19.0,deepseek-ai/DeepSeek-V4-Flash,b200_sxm,fp4,agg,1024,1024,fp8_block,mxfp4,16,8,1,1,8,1,100,10\n",
        "b,sglang,0.5.8,deepseek-ai/DeepSeek-V4-Flash,b200_sxm,fp4,agg,1024,1024,fp8_block,mxfp4,16,8,1,1,8,1,100,10\n",
        "c,trtllm,1.2.0rc6,deepseek-ai/DeepSeek-V4-Pro,b200_sxm,fp4,agg,1024,1024,fp8_block,mxfp4,16,8,1,1,1,8,100,10\n",
    ]
    assert_aic_rows_run(tmp_path, rows)


def test_mtp_serving_runs_with_a_window_only_draft():
    import decodelab

    r = decodelab.evaluate(
        "model=deepseek_v4_flash", "hardware=dgx_h100", "workload.weight_dtype=mxfp4", "workload.kv_dtype=fp8",
        "engine=sglang", "engine.mtp.k=2", "workload=closed_loop", "workload.concurrency=8",
        "workload.prompt_len=1024", "workload.output_len=64", "tracking=off",
    )  # fmt: skip
    assert r.status == "ok" and r.metrics["tpot_ms"] > 0


def test_fp4_rows_run_the_checkpoints_own_four_bit_dtype():
    import pandas as pd
    from decodelab.runs.aic_rows import precision_of

    row = lambda path: pd.Series({"precision": "fp4", "model_path": path})  # noqa: E731
    assert precision_of(row("deepseek-ai/DeepSeek-V4-Flash"), "deepseek_v4_flash") == "mxfp4"
    assert precision_of(row("nvidia/DeepSeek-V4-Flash-NVFP4"), "deepseek_v4_flash") == "nvfp4"
