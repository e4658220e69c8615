"""Convert one chip's AIConfigurator operator tables to decodelab's shipped tables and fit CSVs (A100 SXM, L40S,
RTX PRO 6000 Blackwell Server Edition).

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0),
aic-core/src/aiconfigurator_core/systems/data/<chip>/<kind>/<engine>/<version>/<table>.parquet, read with `git show`
from the mirror at $AIC (a git directory; its silicon_sample.csv is never read). The conversions are the ones
framework/data/operators/README.md states for the other chips: `latency` renamed `latency_ms`; GEMMs: the bfloat16 /
fp8 / fp8_block rows (the GEMM law and table have no integer weight-only class) and TensorRT-LLM's nvfp4 rows (as the
other Blackwell chips' TensorRT-LLM tables), not vLLM's fp8_block rows (timed outside a CUDA graph); decode attention:
TensorRT-LLM's `torch_flow` rows, `window_size` 0 where the source has no such column (vLLM, SGLang: full attention
only); engine all-reduces: the CUDA-graph rows; MoE: balanced routing, gated kernels, the median over repeated shapes
within one kernel source; MLA decode: the decode attention schema, one KV head of dim 576. CHIPS says which version of
each table ships and why (docs/journal/2026-11-29-a100-l40s-operators.md, 2026-11-29-rtx-pro-6000-operators.md).
Besides the shipped files, `--fit DIR` writes the CSVs `decodelab fit-hardware` fits the chip's laws to, and
`--releases` the tables per engine release (RELEASES; hardware.op_tables.by_version). Run from the repository root:

    AIC=/path/to/aiconfigurator/.git python tools/aic_chip_tables.py a100_sxm --fit /tmp/a100_fit
    AIC=/path/to/aiconfigurator/.git python tools/aic_chip_tables.py --releases
"""

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from decodelab.opcost.moe_blocks import COLUMNS as MOE_COLUMNS

AIC = os.environ.get("AIC", "aiconfigurator/.git")
COMMIT = "095f58a5"
ROOT = "aic-core/src/aiconfigurator_core/systems/data"
OPS = Path("framework/data/operators")
GEMM = ["gemm_dtype", "m", "n", "k", "latency_ms"]
ATTN = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size", "attn_dtype"]
ATTN = ["kernel_source", *ATTN, "kv_cache_dtype", "step", "latency_ms"]
AR = ["framework", "kernel_source", "allreduce_dtype", "num_gpus", "message_size", "latency_ms"]
WEIGHT_BYTES = {"bfloat16": 2, "fp8": 1, "fp8_block": 1, "nvfp4": 0.5}  # nvfp4: the collector's, scales aside
# the dtypes each engine's GEMM table ships (vLLM's fp8_block: timed outside a CUDA graph, framework/data/operators)
GEMM_DTYPES = {
    "TRTLLM": ("bfloat16", "fp8", "fp8_block", "nvfp4"),
    "VLLM": ("bfloat16", "fp8"),
    "SGLang": ("bfloat16", "fp8", "fp8_block"),
}
# datasheets (conf/hardware/<chip>.yaml)
HBM_GB_S = {"a100_sxm": 2039, "l40s": 864, "rtx_pro_6000_server": 1597, "h100_sxm": 3350, "h200_sxm": 4800}
HBM_GB_S.update(gb200=8000, gb300=8000)
GRAPH = ("vLLM_custom_graph", "SGLang_CustomAllReduce_graph")

# chip -> shipped kind -> (engine/version of the source, why this version). Rules of the other chips: the oldest
# version of each engine; TensorRT-LLM decode attention from 1.3.0rc20 (older collectors: K-only pools, a cache
# race); an MoE table with balanced-routing rows (the oldest that has them).
CHIPS = {
    "a100_sxm": {
        "gemm": ["trtllm/1.0.0", "vllm/0.14.0", "sglang/0.5.9"],
        "generation_attention": ["vllm/0.14.0", "sglang/0.5.9"],  # TensorRT-LLM 1.0.0's beat the HBM peak
        "allreduce": ["vllm/0.14.0", "sglang/0.5.9"],
        "moe": ["sglang/0.5.10"],  # trtllm 1.0.0, vllm 0.14.0, sglang 0.5.9: power-law routing rows only
        "generation_mla": ["trtllm/1.0.0"],
    },
    "l40s": {
        "gemm": ["trtllm/1.0.0", "vllm/0.14.0", "sglang/0.5.9"],
        "generation_attention": ["trtllm/1.3.0rc20", "vllm/0.14.0", "sglang/0.5.9"],
        "allreduce": ["vllm/0.14.0", "sglang/0.5.10"],  # sglang/0.5.9's file holds TensorRT-LLM 1.0.0's rows
        "moe": ["trtllm/1.3.0rc15", "vllm/0.22.0", "sglang/0.5.10"],  # the oldest with balanced rows of each
        "generation_mla": ["trtllm/1.0.0"],
    },
    # RTX PRO 6000 Blackwell Server Edition (docs/journal/2026-11-29-rtx-pro-6000-operators.md). The 1.3.0rc10 /
    # 0.19.0 / 0.5.10 collections ran on a 2-GPU host (AIConfigurator's systems file said num_gpus_per_node 2 until
    # dec5f4cd2), the later ones and NCCL 2.29.2 on the 8-GPU PCIe Gen5 node the hardware file models
    "rtx_pro_6000_server": {
        "gemm": ["trtllm/1.3.0rc10", "vllm/0.19.0", "sglang/0.5.10"],
        # vllm/0.19.0's FlashInfer FP8 rows at head dim 256 read KV at ~2x the 1597 GB/s peak far beyond the 128 MB
        # L2 (169 of 183 rows above 384 MB, up to 3.0 TB/s; 0.24.0 times them a median 1.9x longer): 0.24.0 is sound
        "generation_attention": ["trtllm/1.3.0rc20", "vllm/0.24.0", "sglang/0.5.10"],
        # vllm/0.19.0 and sglang/0.5.10: 2 GPUs only, on the 2-GPU host, 2.1-2.5x the 8-GPU node's NCCL 2.29.2 times
        # above 1 MB (busbw 15 vs 39 GB/s), 2.0-3.0x its engines'; the oldest of the 8-GPU node (2, 4, 8 GPUs) ship
        "allreduce": ["vllm/0.24.0", "sglang/0.5.14"],
        "moe": ["trtllm/1.3.0rc10", "vllm/0.19.0", "sglang/0.5.10"],  # vllm 0.14.0, sglang 0.5.9: power law
        "generation_mla": ["trtllm/1.3.0rc10", "sglang/0.5.10"],
    },
}
# fit-hardware's inputs (kind: engine/version), TensorRT-LLM's own where it is sound
FITS = {
    "a100_sxm": {
        "gemm": "trtllm/1.0.0",
        "context_attention": "trtllm/1.0.0",
        "generation_attention": "vllm/0.14.0",
        "custom_allreduce": "trtllm/1.0.0",
        "nccl": "nccl/2.27.3",
    },
    "l40s": {
        "gemm": "trtllm/1.0.0",
        "context_attention": "trtllm/1.0.0",
        "generation_attention": "trtllm/1.3.0rc20",
        "custom_allreduce": "trtllm/1.0.0",
        "nccl": "nccl/2.27.3",
    },
    "rtx_pro_6000_server": {
        "gemm": "trtllm/1.3.0rc10",
        "context_attention": "trtllm/1.3.0rc10",
        "generation_attention": "trtllm/1.3.0rc20",  # 1.3.0rc10's read KV at up to 3.05 TB/s above 384 MB
        "custom_allreduce": "trtllm/1.3.0rc20",  # 1.3.0rc10's: 2 GPUs, the 2-GPU host (as vLLM's 0.19.0 above)
        "nccl": "nccl/2.29.2",
    },
}
SOURCE = {  # shipped kind -> (folder, table)
    "gemm": ("gemm", "gemm_perf"),
    "generation_attention": ("attention", "generation_attention_perf"),
    "context_attention": ("attention", "context_attention_perf"),
    "allreduce": ("comm", "custom_allreduce_perf"),
    "custom_allreduce": ("comm", "custom_allreduce_perf"),
    "nccl": ("comm", "nccl_perf"),
    "moe": ("moe", "moe_perf"),
    "generation_mla": ("mla", "generation_mla_perf"),
}


def source(chip: str, kind: str, engine_version: str) -> pd.DataFrame:
    folder, table = SOURCE[kind]
    path = f"{ROOT}/{chip}/{folder}/{engine_version}/{table}.parquet"
    blob = subprocess.run(
        ["git", "--git-dir", AIC, "show", f"{COMMIT}:{path}"], capture_output=True, check=True
    )
    return pd.read_parquet(io.BytesIO(blob.stdout)).rename(columns={"latency": "latency_ms"})


def gemm(df: pd.DataFrame, hbm_gb_s: float) -> pd.DataFrame:
    """The GEMM rows, each no faster than its weight read at the HBM peak: a row that reads its weight faster was
    served from L2 (the L40S's 96 MB hold the collector's weight copies up to ~21 MB of weight; on the RTX PRO 6000's
    128 MB TensorRT-LLM's collector re-reads one copy of a weight above 128 MB, most of it L2-resident); a serving
    step reads a layer's weights from HBM, every other layer having passed through L2 since."""
    df = df[df.gemm_dtype.isin(GEMM_DTYPES[df.framework.iloc[0]])][GEMM].reset_index(drop=True)
    read_ms = df.n * df.k * df.gemm_dtype.map(WEIGHT_BYTES) / (hbm_gb_s * 1e9) * 1e3
    print(f"  {int((df.latency_ms < read_ms).sum())} GEMM rows raised to the weight read", file=sys.stderr)
    return df.assign(latency_ms=df.latency_ms.where(df.latency_ms >= read_ms, read_ms))


def attention(df: pd.DataFrame) -> pd.DataFrame:
    if "window_size" not in df.columns:  # vLLM / SGLang collectors: full attention only
        df = df.assign(window_size=0)
    if (df.framework == "TRTLLM").all():
        df = df[df.kernel_source == "torch_flow"]
    if "step" not in df.columns:
        df = df.assign(step=0)
    return df[df.window_size == 0][ATTN].reset_index(drop=True)  # full-attention rows


def allreduce(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.kernel_source.isin(GRAPH)][AR].reset_index(drop=True)


def moe(df: pd.DataFrame) -> pd.DataFrame:
    df = df[(df.distribution == "balanced") & ~df.kernel_source.str.endswith("nongated")]
    keys = [c for c in MOE_COLUMNS if c != "latency_ms"] + ["kernel_source"]
    return df.groupby(keys, sort=True).latency_ms.median().reset_index()[[*MOE_COLUMNS, "kernel_source"]]


def mla(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(num_key_value_heads=1, head_dim=576, window_size=0, attn_dtype=df.mla_dtype)
    return df[ATTN].reset_index(drop=True)


CONVERT = {"generation_attention": attention, "allreduce": allreduce, "moe": moe}
CONVERT["generation_mla"] = mla
SUFFIX = {"allreduce": "csv"}


def converted(chip: str, kind: str, engine_version: str) -> pd.DataFrame:
    """AIConfigurator's `kind` table of `chip` at engine/version, converted to the shipped schema."""
    df = source(chip, kind, engine_version)
    return gemm(df, HBM_GB_S[chip]) if kind == "gemm" else CONVERT[kind](df)


def write(df: pd.DataFrame, chip: str, kind: str, engine_version: str) -> None:
    """framework/data/operators/<chip>_<kind>_<engine>_<version>.<parquet | csv>."""
    out = OPS / f"{chip}_{kind}_{engine_version.replace('/', '_')}.{SUFFIX.get(kind, 'parquet')}"
    if out.suffix == ".csv":
        df.to_csv(out, index=False)
    else:
        df.to_parquet(out, index=False, compression="zstd")
    print(out, len(df), "rows", file=sys.stderr)


def ship(chip: str) -> None:
    for kind, versions in CHIPS[chip].items():
        for ev in versions:
            write(converted(chip, kind, ev), chip, kind, ev)


def fit_csvs(chip: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for kind, ev in FITS[chip].items():
        df = source(chip, kind, ev)
        if kind == "gemm":
            df = gemm(df, HBM_GB_S[chip])
        elif kind.endswith("attention"):
            df = attention(df).drop(columns="kernel_source")
            df = df.drop(columns="step") if kind == "context_attention" else df
        elif kind == "custom_allreduce":
            df = df[["allreduce_dtype", "num_gpus", "message_size", "latency_ms"]]
        else:
            df = df[["op_name", "nccl_dtype", "num_gpus", "message_size", "latency_ms"]]
        name = {"custom_allreduce": "allreduce", "nccl": ""}.get(kind, kind)
        df.to_csv(out / f"{name + '_' if name else ''}{ev.replace('/', '_')}.csv", index=False)
    for ev in CHIPS[chip]["allreduce"]:  # the engines' own all-reduces, as shipped
        df = allreduce(source(chip, "allreduce", ev))
        df.to_csv(out / f"allreduce_{ev.replace('/', '_')}.csv", index=False)


# Release tables (hardware.op_tables.by_version; decodelab.opcost.versions): chip -> engine -> the releases beside
# the engine's default table (<kind>_by_engine) that ship, each the kinds AIConfigurator collected in it. The
# releases the engine files cover (vLLM to 0.19, SGLang to 0.5.9: conf/engine/*.yaml `versions`) that a chip's
# collection holds; SGLang 0.5.6.post2's MoE rows are power-law routing only (its default, 0.5.9, is read)
RELEASES = {
    "h100_sxm": {"vllm": ["0.19.0"], "sglang": ["0.5.6.post2"]},
    "h200_sxm": {"vllm": ["0.18.0", "0.19.0"], "sglang": ["0.5.6.post2"]},
    "gb200": {"vllm": ["0.19.0"]},
    "gb300": {"vllm": ["0.19.0"]},
}
RELEASE_KINDS = ("gemm", "generation_attention", "generation_mla", "moe")


def release_moe(own: pd.DataFrame, chip: str, engine: str) -> pd.DataFrame:
    """A release's own MoE rows (`moe`) and, beside them, the rows its engine's default table holds from other
    collections (decodelab.opcost.moe_blocks ONLY_NAMED: tools/aic_moe_kernel_convert.py BORROWS), which
    no release's own collection times: a release reads the kernels it lacks as the default does."""
    import yaml

    from decodelab.opcost.moe_blocks import ONLY_NAMED

    default = yaml.safe_load(Path(f"conf/hardware/{chip}.yaml").read_text())["op_tables"]["moe_by_engine"][
        engine
    ]
    shipped = pd.read_parquet(OPS.parent / default)
    borrowed = shipped[shipped.kernel_source.isin(ONLY_NAMED)]
    return pd.concat([own, borrowed[[*MOE_COLUMNS, "kernel_source"]]], ignore_index=True)


def ship_releases() -> None:
    """Every RELEASES table, named <chip>_<kind>_<engine>_<release>.parquet as the default tables are."""
    for chip, engines in RELEASES.items():
        for engine, versions in engines.items():
            for version in versions:
                for kind in RELEASE_KINDS:
                    try:
                        df = converted(chip, kind, f"{engine}/{version}")
                    except subprocess.CalledProcessError:
                        continue  # not collected in this release
                    if kind == "moe":
                        if not len(df):
                            continue  # power-law routing rows only
                        df = release_moe(df, chip, engine)
                    write(df, chip, kind, f"{engine}/{version}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chip", nargs="?", choices=sorted(CHIPS), help="a chip's default tables")
    ap.add_argument("--fit", type=Path, help="also write fit-hardware's input CSVs to this directory")
    ap.add_argument("--releases", action="store_true", help="write every RELEASES table")
    a = ap.parse_args()
    if a.releases:
        ship_releases()
    if a.chip:
        ship(a.chip)
    if a.chip and a.fit:
        fit_csvs(a.chip, a.fit)


if __name__ == "__main__":
    main()
