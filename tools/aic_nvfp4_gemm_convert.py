"""Append AIConfigurator's NVFP4 GEMM rows to the shipped TensorRT-LLM GEMM tables (issue 39 item 4).

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0),
aic-core/src/aiconfigurator_core/systems/data/<chip>/gemm/trtllm/<version>/gemm_perf.parquet,
the same file and version each shipped table was converted from; the same conversion (columns
gemm_dtype, m, n, k, latency_ms <- latency), rows of gemm_dtype nvfp4 only, appended after the
shipped rows (which stay byte-for-byte the same values). Run from the repository root with the
mirror at $AIC (a git directory)."""

import io
import os
import subprocess
import sys

import pandas as pd

AIC = os.environ.get("AIC", "aiconfigurator/.git")  # a clone of github.com/ai-dynamo/aiconfigurator
COMMIT = "095f58a5"
FILES = {
    "b200_sxm": "1.2.0rc5",
    "gb200": "1.3.0rc10",
    "b300_sxm": "1.3.0rc10",
    "gb300": "1.3.0rc10",
}


def source(chip: str, version: str) -> pd.DataFrame:
    path = f"aic-core/src/aiconfigurator_core/systems/data/{chip}/gemm/trtllm/{version}/gemm_perf.parquet"
    blob = subprocess.run(
        ["git", "-C", AIC, "show", f"{COMMIT}:{path}"], capture_output=True, check=True
    ).stdout
    return pd.read_parquet(io.BytesIO(blob))


def main() -> None:
    for chip, version in FILES.items():
        out = f"framework/data/operators/{chip}_gemm_trtllm_{version}.parquet"
        shipped = pd.read_parquet(out)
        shipped = shipped[shipped.gemm_dtype != "nvfp4"]  # idempotent
        src = source(chip, version)
        add = src[src.gemm_dtype == "nvfp4"][["gemm_dtype", "m", "n", "k", "latency"]]
        add = add.rename(columns={"latency": "latency_ms"}).astype(shipped.dtypes.to_dict())
        both = pd.concat([shipped, add], ignore_index=True)
        both.to_parquet(out, index=False, compression="zstd")
        print(chip, version, len(shipped), "+", len(add), "nvfp4 rows", file=sys.stderr)


if __name__ == "__main__":
    main()
