"""The pricing context of a design's ops (decodelab.opcost reads it): the engine family whose laws and tables
apply, the chip's peak rate for the weights' dtype (FP4 weights on a chip without FP4 units), the MoE kernel
(engine.moe_backend) and MXFP4 experts' activations (engine.moe_mxfp4). Nothing here is Hydra-specific: `cfg`
is any object with attribute access."""

from __future__ import annotations

from typing import List

from decodelab.core.checks import DTYPE_BYTES, FP4_DTYPES
from decodelab.errors import ConfigError
from decodelab.opcost import sampler
from decodelab.opcost.base import Ctx
from decodelab.opcost.moe_blocks import KERNELS
from decodelab.opcost.versions import release


def engine_family(cfg) -> str:
    """The engine family whose kernels run the design (engine.family; "" without an engine node)."""
    eng = getattr(cfg, "engine", None)
    return str(getattr(eng, "family", "") or "") if eng is not None else ""


def engine_release(cfg) -> str:
    """engine.version as given ("" without one); one error line where it is not a release."""
    eng = getattr(cfg, "engine", None)
    text = str(getattr(eng, "version", "") or "") if eng is not None else ""
    release(text)  # raises ConfigError naming engine.version
    return text.strip()


def peak_flops(hw, dtype: str) -> float:
    """Per-chip peak FLOP/s for the weights' precision (FP8 units where the chip has them). FP4
    weights run at the FP4 rate where the chip has FP4 units, else they are dequantized and run at
    the FP8 rate (or BF16 where there are no FP8 units either): fp4_note says so."""
    if dtype in FP4_DTYPES and hw.peak_tflops_fp4 > 0:
        return hw.peak_tflops_fp4 * 1e12
    if (DTYPE_BYTES[dtype] == 1.0 or dtype in FP4_DTYPES) and hw.peak_tflops_fp8 > 0:  # 8-bit weights
        return hw.peak_tflops_fp8 * 1e12
    return hw.peak_tflops_bf16 * 1e12


def fp4_note(hw, dtype: str) -> List[str]:
    """The note of FP4 weights on a chip without FP4 units (their compute rate, not their bytes)."""
    if dtype not in FP4_DTYPES or hw.peak_tflops_fp4 > 0:
        return []
    rate = "FP8" if hw.peak_tflops_fp8 > 0 else "BF16"
    return [
        f"{hw.name} has no FP4 units (hardware.peak_tflops_fp4=0): {dtype} weights are read as "
        f"{DTYPE_BYTES[dtype]:g} B each and dequantized, the matrix math runs at the {rate} rate"
    ]


MOE_MXFP4 = ("w4a16", "w4a8")
MOE_BACKENDS = tuple(KERNELS)  # engine.moe_backend values (opcost/moe.py)


def moe_mxfp4(cfg) -> str:
    """engine.moe_mxfp4: the activations MXFP4 expert weights run with (w4a16: BF16, w4a8: MXFP8); w4a16 under
    the Marlin backend, a weight-only kernel (it dequantizes each 4-bit weight to BF16: opcost/moe_blocks.py SOLE)."""
    v = getattr(cfg.engine, "moe_mxfp4", "w4a16")
    if v not in MOE_MXFP4:
        raise ConfigError(f"engine.moe_mxfp4={v!r} is not one of: {', '.join(MOE_MXFP4)}")
    return "w4a16" if moe_backend(cfg) == "marlin" else v


def moe_backend(cfg) -> str:
    """engine.moe_backend, or engine.moe_backend_attention_dp where set and attention runs data-parallel
    (hardware.attention_dp > 1 or MLA's data mapping); engine.moe_backend_fp8_block where set and the
    weights are block-scaled FP8; model.moe_backend_by_engine's entry for the engine's family before any."""
    e, hw = cfg.engine, cfg.hardware
    dp = getattr(hw, "attention_dp", 1) > 1 or getattr(hw, "mla_mapping", "") == "data"
    v = (dp and getattr(e, "moe_backend_attention_dp", "")) or getattr(e, "moe_backend", "")
    if cfg.workload.weight_dtype == "fp8_block":
        v = getattr(e, "moe_backend_fp8_block", "") or v
    family = engine_family(cfg)
    own = (getattr(cfg.model, "moe_backend_by_engine", None) or {}).get(family, "") if family else ""
    if own and own not in MOE_BACKENDS:
        raise ConfigError(
            f"model.moe_backend_by_engine.{family}={own!r} is not one of: {', '.join(MOE_BACKENDS)}"
        )
    v = own or v
    if v and v not in MOE_BACKENDS:
        raise ConfigError(f"engine.moe_backend={v!r} is not one of: {', '.join(MOE_BACKENDS)} (or empty)")
    return v


GEMM_BACKENDS_FP8_BLOCK = ("", "trtllm")  # engine.gemm_backend_fp8_block values (opcost/gemm.py)


def gemm_backend_fp8_block(cfg) -> str:
    """engine.gemm_backend_fp8_block: the kernel of block-scaled FP8 dense GEMMs ("" the engine's own)."""
    v = str(getattr(cfg.engine, "gemm_backend_fp8_block", "") or "")
    if v not in GEMM_BACKENDS_FP8_BLOCK:
        raise ConfigError(f"engine.gemm_backend_fp8_block={v!r} is not one of: trtllm (or empty)")
    return v


def cost_context(cfg) -> Ctx:
    """The plain values the operator costs need (decodelab.opcost): chip, workload dtypes, tensor
    parallelism, engine family, the engine's sampler path and the vocabulary, engine.moe_mxfp4, the
    MoE backend (moe_backend) and the block-scaled FP8 GEMM kernel (gemm_backend_fp8_block)."""
    hw, w = cfg.hardware, cfg.workload
    return Ctx(
        hw=hw,
        weight_dtype=w.weight_dtype,
        kv_dtype=w.kv_dtype,
        tp=hw.tensor_parallel,
        engine=engine_family(cfg),  # whose own laws and tables (all-reduce, GEMM, attention) apply
        engine_version=engine_release(cfg),  # the release whose tables it reads (op_tables.by_version)
        sampler_path=sampler.path(cfg),
        vocab=int(cfg.model.vocab_size),
        moe_mxfp4=moe_mxfp4(cfg),
        moe_backend=moe_backend(cfg),
        gemm_fp8_block=gemm_backend_fp8_block(cfg),
    )
