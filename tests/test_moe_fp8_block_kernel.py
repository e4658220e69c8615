"""Block-scaled FP8 MoE on B200 under the kernel each launch names (issue 39, B200 FP8 DeepSeek decode):
TensorRT-LLM's TRTLLM backend reads the TRTLLM-gen fp8 block-scale rows (FlashInfer's build of the kernel, timed
by AIConfigurator's SGLang 0.5.14 collector, kernel_source sglang_flashinfer_trtllm_moe), DEEPGEMM and CUTLASS
DeepGEMM's; rows borrowed from another engine's collection are read only by a backend that names them
(framework/opcost/moe_blocks.py KERNELS, ONLY_NAMED, kernel_rows)."""

from __future__ import annotations

import pytest
from conftest import compose_cfg, moe_kernel_table
from decodelab.core.cost_setup import moe_backend
from decodelab.kernel_layout import M_GRID
from decodelab.opcost import moe_blocks
from decodelab.paths import DATA_DIR

FI = "sglang_flashinfer_trtllm_moe"


@pytest.fixture
def fp8_block_kernels(tmp_path):
    """Block ep 1 timed by DeepGEMM (2 ms) and TRTLLM-gen (1 ms); ep 2 by DeepGEMM only (3 ms); ep 4 by
    TRTLLM-gen only (4 ms), at every token count."""
    kernels = ((1, {"deepgemm": 2.0, FI: 1.0}), (2, {"deepgemm": 3.0}), (4, {FI: 4.0}))
    return moe_kernel_table(tmp_path / "moe.csv", "fp8_block", kernels)


def test_trtllm_reads_trtllm_gen_others_never_the_borrowed_rows(fp8_block_kernels):
    """trtllm: TRTLLM-gen where measured (1 ms, 4 ms), DeepGEMM where only it measured (3 ms). cutlass and
    "": DeepGEMM (2 ms, 3 ms; the median of "" over DeepGEMM alone), and no block where only the borrowed
    kernel measured (ep 4: None, so the block is carried from a measured neighbour)."""
    p, shape = fp8_block_kernels, (1024, 512, 2, 8, 1)
    at = {
        (b, ep): moe_blocks.block_row(p, "fp8_block", (*shape, ep), b)
        for b in ("trtllm", "cutlass", "")
        for ep in (1, 2, 4)
    }
    got = {k: (None if v is None else v[0]) for k, v in at.items()}
    assert got == pytest.approx(
        {("trtllm", 1): 1e-3, ("trtllm", 2): 3e-3, ("trtllm", 4): 4e-3,
         ("cutlass", 1): 2e-3, ("cutlass", 2): 3e-3, ("cutlass", 4): None,
         ("", 1): 2e-3, ("", 2): 3e-3, ("", 4): None}
    )  # fmt: skip


def test_shipped_b200_deepseek_fp8_block_at_moe_tp8():
    """DeepSeek's block (7168, 2048, top-8 of 256) at moe_tp 8, moe_ep 1 in B200's TensorRT-LLM table: under
    TRTLLM the source rows of AIConfigurator @095f58a5 systems/data/b200_sxm/moe/sglang/0.5.14 (balanced,
    flashinfer_trtllm), 36.127 / 41.718 / 57.212 us at 1 / 4 / 8 tokens; DeepGEMM measured no block on
    8 GPUs (its 1.2.0rc5 rows hold 16 and more), so under DEEPGEMM the block is carried (no exact row)."""
    path = str(DATA_DIR / "operators" / "b200_sxm_moe_trtllm_1.2.0rc5_mxfp4_1.3.0rc10.parquet")
    shape = (7168, 2048, 8, 256, 8, 1)
    row = moe_blocks.block_row(path, "fp8_block", shape, "trtllm")
    at = {n: row[M_GRID.index(n)] for n in (1, 4, 8)}
    assert at == pytest.approx({1: 36.127e-6, 4: 41.718e-6, 8: 57.212e-6}, rel=1e-4)
    assert moe_blocks.block_row(path, "fp8_block", shape, "deepgemm") is None
    assert moe_blocks.block_row(path, "fp8_block", shape, "") is None


def test_fp8_block_backend_of_a_launch():
    """InferenceX TensorRT-LLM 1.2 (engine trtllm_inferencex): TRTLLM for FP8 too; the 1.1 scripts' DEEPGEMM
    (aic_mapping.yaml engine.moe_backend_fp8_block) applies to block-scaled FP8 only, NVFP4 keeps TRTLLM."""
    base = ("model=deepseek_r1", "hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8",
            "engine=trtllm_inferencex")  # fmt: skip
    fp8, dg = "workload.weight_dtype=fp8_block", "engine.moe_backend_fp8_block=deepgemm"
    assert moe_backend(compose_cfg(*base, fp8)) == "trtllm"
    assert moe_backend(compose_cfg(*base, fp8, dg)) == "deepgemm"
    assert moe_backend(compose_cfg(*base, "workload.weight_dtype=nvfp4", dg)) == "trtllm"
    assert moe_backend(compose_cfg(*base, fp8, "hardware.attention_dp=8")) == "cutlass"  # DeepGEMM's rows
