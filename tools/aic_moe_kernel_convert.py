"""Re-convert the NVFP4 rows of decodelab's B200 and GB200 TensorRT-LLM MoE tables with one curve per kernel (issue 39
item 4).

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0),
aic-core/src/aiconfigurator_core/systems/data/<chip>/moe/trtllm/<version>/moe_perf.parquet (b200_sxm 1.2.0rc5,
gb200 1.3.0rc10), the files the shipped tables' TensorRT-LLM rows came from. The shipped conversion took the median over kernel sources where both of this
table's NVFP4 kernels measured a shape (moe_torch_flow_cutlass: moe_backend CUTLASS; moe_torch_flow_min_latency:
moe_backend TRTLLM, collector/trtllm/collect_moe.py `if min_latency_mode: model_config.moe_backend = "trtllm"`),
naming the first. Here: the same filter (balanced routing, gated kernels), the median over repeated shapes within
one kernel only, kernel_source kept; every other row of the shipped table is left as it is. Run from the repository
root with the mirror at $AIC (a git directory).

`borrow` (issue 39, B200 block-FP8 decode; BORROWS): TensorRT-LLM's TRTLLM MoE backend runs block-scaled
FP8 experts on SM100 with TRTLLM-gen kernels, which no TensorRT-LLM MoE table of this commit times (its collector runs
fp8_block on SM100 with DeepGEMM: collector/trtllm/collect_moe.py `if is_sm_100f(sm_version): model_config.moe_backend =
"deepgemm"`). The same kernel family, as FlashInfer ships it (`trtllm_fp8_block_scale_moe`, the "TRTLLM-gen batched
GEMM" of collector/sglang/collect_moe.py), is timed on the same chip in SGLang 0.5.14's table under
`--moe-runner-backend flashinfer_trtllm` (kernel_source `sglang_flashinfer_trtllm_moe`). Its balanced fp8_block rows
(median over repeats) are appended to the B200 TensorRT-LLM table with that kernel_source kept; every other row is
left as it is (rows of that kernel_source already there are replaced: the step can be re-run). The same rows go to
B200's SGLang 0.5.9 table (InferenceX's SGLang FP8 runs passed `--moe-runner-backend flashinfer_trtllm`; 0.5.9's
collection times Triton only for fp8_block), and vLLM 0.24.0's TRTLLM-gen FP8 rows
(`vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic`, the kernel vLLM 0.19's fp8 oracle selects on SM100) to
B200's vLLM 0.19.0 table, whose fp8_block rows are the legacy collector's Triton `fused_experts`.
`python tools/aic_moe_kernel_convert.py` runs every step; `borrow` alone: `python -c` with BORROWS."""

import io
import os
import subprocess
import sys

import pandas as pd

from decodelab.opcost.moe_blocks import COLUMNS

AIC = os.environ.get("AIC", "aiconfigurator/.git")  # a clone of github.com/ai-dynamo/aiconfigurator
COMMIT = "095f58a5"
SRC = "aic-core/src/aiconfigurator_core/systems/data/{chip}/moe/trtllm/{version}/moe_perf.parquet"
FILES = {  # chip: (source version, shipped table)
    "b200_sxm": ("1.2.0rc5", "framework/data/operators/b200_sxm_moe_trtllm_1.2.0rc5_mxfp4_1.3.0rc10.parquet"),
    "gb200": ("1.3.0rc10", "framework/data/operators/gb200_moe_trtllm_1.3.0rc10.parquet"),
}
KEYS = [c for c in COLUMNS if c != "latency_ms"]  # the shipped MoE table's shape columns


def convert(chip: str, version: str, out: str) -> None:
    src_path = SRC.format(chip=chip, version=version)
    blob = subprocess.run(
        ["git", "-C", AIC, "show", f"{COMMIT}:{src_path}"], capture_output=True, check=True
    ).stdout
    src = pd.read_parquet(io.BytesIO(blob))
    src = src[(src.moe_dtype == "nvfp4") & (src.distribution == "balanced")]
    src = src[~src.kernel_source.str.endswith("nongated")]
    add = src.groupby(KEYS + ["kernel_source"], sort=True).latency.median().reset_index()
    add = add.rename(columns={"latency": "latency_ms"})
    shipped = pd.read_parquet(out)
    keep = shipped[shipped.moe_dtype != "nvfp4"]
    add = add[shipped.columns].astype(shipped.dtypes.to_dict())
    both = pd.concat([keep, add], ignore_index=True)
    both.to_parquet(out, index=False, compression="zstd")
    print(chip, len(keep), "rows kept +", len(add), "nvfp4 rows (per kernel)", file=sys.stderr)


OPS = "framework/data/operators/"
# Kernels an engine runs whose rows its own table of this commit lacks, borrowed from the collection that times them
# on the same chip: (chip, engine/version of the source table, kernel_source, dtype, shipped table it is appended to).
BORROWS = (
    # TensorRT-LLM's TRTLLM backend, block FP8 on SM100: TRTLLM-gen (FlashInfer's build, SGLang 0.5.14's collector)
    ("b200_sxm", "sglang/0.5.14", "sglang_flashinfer_trtllm_moe", "fp8_block", FILES["b200_sxm"][1]),
    # SGLang `--moe-runner-backend flashinfer_trtllm` (InferenceX's B200 FP8 scripts): 0.5.9's collector timed Triton
    # only for fp8_block; 0.5.14's collector times the FlashInfer TRTLLM-gen kernel the flag selects
    (
        "b200_sxm",
        "sglang/0.5.14",
        "sglang_flashinfer_trtllm_moe",
        "fp8_block",
        OPS + "b200_sxm_moe_sglang_0.5.9.parquet",
    ),
    # SGLang `--moe-runner-backend flashinfer_trtllm` (`--enable-flashinfer-trtllm-moe` before d8fe8f73e) on NVFP4
    # experts: every InferenceX SGLang B200 FP4 script; 0.5.9's collection times CuteDSL only for nvfp4
    (
        "b200_sxm",
        "sglang/0.5.14",
        "sglang_flashinfer_trtllm_moe",
        "nvfp4",
        OPS + "b200_sxm_moe_sglang_0.5.9.parquet",
    ),
    # vLLM 0.19's fp8 oracle on SM100 (FLASHINFER_TRTLLM first): its 0.19.0 table is the legacy collector's Triton
    # fused_experts; 0.24.0's collector builds FusedMoE, so vLLM picks the kernel (TrtLlmFp8ExpertsMonolithic)
    (
        "b200_sxm",
        "vllm/0.24.0",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
        "fp8_block",
        OPS + "b200_sxm_moe_vllm_0.19.0.parquet",
    ),
    # vLLM's Marlin W4A16 MoE on Hopper (VLLM_MXFP4_USE_MARLIN=1 in InferenceX's gpt-oss H100 / H200 scripts from PR
    # #327): no table of this commit times it at gpt-oss's shape; vLLM 0.24.0's collector builds FusedMoE and times
    # the Marlin kernel on MXFP4 weights (Kimi-K3's block) and on INT4 weights (Kimi-K2's), one family for the
    # `marlin` backend (decodelab.opcost.moe_blocks SOLE). The 0.14.0 tables' own int4_wo rows (`vllm_marlin_moe`)
    # are the legacy collector's fused_experts, 2-5x slower than these at the same block: kept, not named
    *(
        (chip, "vllm/0.24.0", kernel, dtype, OPS + f"{chip}_moe_vllm_0.14.0.parquet")
        for chip in ("h100_sxm", "h200_sxm")
        for kernel, dtype in (
            ("vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu", "w4a16_mxfp4"),
            ("vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "int4_wo"),
        )
    ),
    # Kimi-K3's MXFP4 experts on vLLM (model.moe_backend_by_engine {vllm: marlin}): the Marlin MoE vLLM 0.24.0 picks
    # for them on Blackwell too, timed at K3's block by its collector on each SM100 chip (the Hopper tables hold it
    # from the borrow above); only the B300 / GB300 hold K3 on 8 GPUs
    *(
        (chip, "vllm/0.24.0", kernel, "w4a16_mxfp4", OPS + table)
        for chip, kernel, table in (
            (
                "b200_sxm",
                "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts",
                "b200_sxm_moe_vllm_0.19.0.parquet",
            ),
            (
                "b300_sxm",
                "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts",
                "b300_sxm_moe_vllm_0.19.0.parquet",
            ),
            (
                "gb200",
                "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
                "gb200_moe_vllm_0.14.0.parquet",
            ),
            (
                "gb300",
                "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
                "gb300_moe_vllm_0.14.0.parquet",
            ),
        )
    ),
    # The other SM100 chips (B300, GB200, GB300) run the same kernels under the same flags, and their tables of this
    # commit lack them just as the B200's did: TRTLLM-gen block-FP8 for TensorRT-LLM's TRTLLM backend and for SGLang's
    # flashinfer_trtllm runner (also its NVFP4), vLLM's TRTLLM-gen block-FP8 experts; each from the chip's own SGLang
    # 0.5.14 / vLLM 0.24.0 collection (InferenceX's B300 scripts reuse the B200 recipes as-is: aic_mapping.yaml launches)
    *(
        (chip, src, kernel, dtype, OPS + table)
        for chip, sgl, vllm in (
            ("b300_sxm", "sglang_0.5.10", "vllm_0.19.0"),
            ("gb200", "sglang_0.5.9", "vllm_0.14.0"),
            ("gb300", "sglang_0.5.9", "vllm_0.14.0"),
        )
        for src, kernel, dtype, table in (
            (
                "sglang/0.5.14",
                "sglang_flashinfer_trtllm_moe",
                "fp8_block",
                f"{chip}_moe_trtllm_1.3.0rc10.parquet",
            ),
            ("sglang/0.5.14", "sglang_flashinfer_trtllm_moe", "fp8_block", f"{chip}_moe_{sgl}.parquet"),
            ("sglang/0.5.14", "sglang_flashinfer_trtllm_moe", "nvfp4", f"{chip}_moe_{sgl}.parquet"),
            (
                "vllm/0.24.0",
                "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                "fp8_block",
                f"{chip}_moe_{vllm}.parquet",
            ),
        )
    ),
)


def borrow(chip: str, engine_version: str, kernel: str, dtype: str, out: str) -> None:
    """Append the balanced `dtype` rows of `kernel` from AIConfigurator's `engine_version` table of `chip` to the
    shipped table `out` (median over repeats, kernel_source kept); rows of that kernel and dtype already there are
    replaced."""
    src_path = SRC.replace("trtllm/{version}", engine_version).format(chip=chip)
    blob = subprocess.run(
        ["git", "-C", AIC, "show", f"{COMMIT}:{src_path}"], capture_output=True, check=True
    ).stdout
    src = pd.read_parquet(io.BytesIO(blob))
    src = src[(src.moe_dtype == dtype) & (src.distribution == "balanced") & (src.kernel_source == kernel)]
    add = src.groupby(KEYS + ["kernel_source"], sort=True).latency.median().reset_index()
    add = add.rename(columns={"latency": "latency_ms"})
    shipped = pd.read_parquet(out)
    keep = shipped[(shipped.kernel_source != kernel) | (shipped.moe_dtype != dtype)]
    add = add[shipped.columns].astype(shipped.dtypes.to_dict())
    pd.concat([keep, add], ignore_index=True).to_parquet(out, index=False, compression="zstd")
    print(out, len(keep), "rows kept +", len(add), f"{dtype} rows of {kernel}", file=sys.stderr)


def main() -> None:
    for chip, (version, out) in FILES.items():
        convert(chip, version, out)
    which = sys.argv[1:]  # optional: only the borrows whose table path contains one of these words
    for b in BORROWS:
        if not which or any(w in b[-1] for w in which):
            borrow(*b)


if __name__ == "__main__":
    main()
