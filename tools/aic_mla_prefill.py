"""Write AIConfigurator's MLA prefill attention tables (context_mla_perf) as the CSVs `decodelab fit-hardware`
fits a chip's `op_fit.mla_prefill` (TensorRT-LLM's kernel) and `op_fit.mla_prefill_by_engine.sglang` laws to.

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0),
aic-core/src/aiconfigurator_core/systems/data/<chip>/mla/<engine>/<version>/context_mla_perf.parquet, read with
`git show` from the mirror at $AIC (a git directory; its silicon_sample.csv is never read). Each collector times
one MLA prefill attention call at DeepSeek's dims (qk 128 + 64, v 128) with `num_heads` heads per GPU and
`batch_size` sequences of `isl` tokens: TensorRT-LLM's MLA context op, SGLang's RadixAttention extend on its
default backend (collector/{trtllm,sglang}/collect_mla.py). `latency` is renamed `latency_ms`; the rows are
otherwise unchanged. SOURCES names the version read for each chip and engine: TensorRT-LLM 1.3.0rc20 (the version
of its decode MLA tables; 1.0.0 on A100 and L40S, the only one there), SGLang 0.5.9 (its decode MLA tables'; none
on A100, L40S, RTX PRO 6000). Run from the repository root, then fit each chip:

    AIC=/path/to/aiconfigurator/.git python tools/aic_mla_prefill.py /tmp/mla_fit
    decodelab fit-hardware /tmp/mla_fit/b200_sxm --hardware b200_sxm
"""

import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

AIC = os.environ.get("AIC", "aiconfigurator/.git")
COMMIT = "095f58a5"
ROOT = "aic-core/src/aiconfigurator_core/systems/data"
COLUMNS = ["framework", "batch_size", "isl", "num_heads", "mla_dtype", "kv_cache_dtype", "latency_ms"]
SOURCES = {
    "a100_sxm": ["trtllm/1.0.0"],
    "l40s": ["trtllm/1.0.0"],
    "rtx_pro_6000_server": ["trtllm/1.3.0rc20"],
    **{c: ["trtllm/1.3.0rc20", "sglang/0.5.9"] for c in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")},
    **{c: ["trtllm/1.3.0rc20", "sglang/0.5.9"] for c in ("gb200", "gb300")},
}


def table(chip: str, source: str) -> pd.DataFrame:
    path = f"{COMMIT}:{ROOT}/{chip}/mla/{source}/context_mla_perf.parquet"
    raw = subprocess.run(["git", "--git-dir", AIC, "show", path], check=True, capture_output=True).stdout
    df = pd.read_parquet(io.BytesIO(raw)).rename(columns={"latency": "latency_ms"})
    df["framework"] = source.split("/")[0]
    return df[COLUMNS]


def main(out: str) -> int:
    for chip, sources in SOURCES.items():
        d = Path(out) / chip
        d.mkdir(parents=True, exist_ok=True)
        for source in sources:
            df = table(chip, source)
            df.to_csv(d / f"context_mla_{source.replace('/', '_')}.csv", index=False)
            print(f"{chip}: {source} {len(df)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "mla_fit"))
