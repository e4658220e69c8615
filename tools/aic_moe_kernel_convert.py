"""Re-convert the NVFP4 rows of decodelab's B200 and GB200 TensorRT-LLM MoE tables with one curve per kernel (issue 39
item 4).

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0),
aic-core/src/aiconfigurator_core/systems/data/<chip>/moe/trtllm/<version>/moe_perf.parquet (b200_sxm 1.2.0rc5,
gb200 1.3.0rc10), the files the shipped tables' TensorRT-LLM rows came from. The shipped conversion took the median over kernel sources where both of this
table's NVFP4 kernels measured a shape (moe_torch_flow_cutlass: moe_backend CUTLASS; moe_torch_flow_min_latency:
moe_backend TRTLLM, collector/trtllm/collect_moe.py `if min_latency_mode: model_config.moe_backend = "trtllm"`),
naming the first. Here: the same filter (balanced routing, gated kernels), the median over repeated shapes within
one kernel only, kernel_source kept; every other row of the shipped table is left as it is. Run from the repository
root with the mirror at $AIC (a git directory)."""

import io
import os
import subprocess
import sys

import pandas as pd

from decodelab.opcost.moe import COLUMNS

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


def main() -> None:
    for chip, (version, out) in FILES.items():
        convert(chip, version, out)


if __name__ == "__main__":
    main()
