"""Convert AIConfigurator's single-kernel tables of every chip to decodelab's shipped ones in framework/data/operators/:
the linear-attention kernels (Gated DeltaNet and Kimi Delta Attention) to `<chip>_linear_attention_<engine>.parquet`
(framework/opcost/linear_attn.py), DeepSeek-V4's hyper-connection mixing to `<chip>_mhc_<engine>.parquet`
(framework/opcost/mhc.py) and MLA's absorbed decode BMMs to `<chip>_mla_bmm_<engine>.parquet` (framework/opcost/mla_bmm.py).

Source: github.com/ai-dynamo/aiconfigurator @095f58a5 (Apache-2.0), aic-core/src/aiconfigurator_core/systems/data/
<chip>/{linear_attention/<engine>/<version>/gdn_perf.parquet, kda/<engine>/<version>/kda_perf.parquet,
mhc/<engine>/<version>/mhc_module_perf.parquet, mla_bmm/<engine>/<version>/mla_bmm_perf.parquet}, read with `git show` from the mirror at $AIC (a git directory; its
silicon_sample.csv is never read).

Linear attention: collected by collector/{vllm,sglang}/collect_gdn.py and collect_kda.py (the engine's own kernels on
one GPU, bf16 activations, an fp32 recurrent state, GPU service time back to back). Kept per row: the kernel's `role`
in a decodelab op (ROLES), the decode rows (phase `generation`, one token a sequence: a curve over sequences) and the
prefill rows of one sequence (phase `context`, batch_size 1: a curve over its tokens); `latency` renamed
`latency_ms`. Dropped: the `verify` rows (speculative verification), prefill rows of several sequences, and kernels
no role names. VERSIONS says which version of each table ships (one per engine and kind, the same on every chip).

Hyper-connections: collected by collector/{vllm,sglang,trtllm}/collect_mhc_module.py (the engine's own kernels for
`num_sites` sublayers back to back inside a CUDA graph). Kept as they are but for the column names (`op_name` ->
`role`, `kernel_source` -> `kernel`, `latency` -> `latency_ms`).

MLA BMMs: collected by collector/{trtllm,sglang}/collect_mla_bmm.py (the engine's q_nope x W_UK (`mla_gen_pre` -> role
`pre`) and attention output x W_UV (`mla_gen_post` -> `post`) batched over `num_heads` heads per GPU, BF16 or FP8
`bmm_dtype`). Kept as they are but for the column names (as mhc's). The versions of the MLA decode attention tables:
TensorRT-LLM 1.3.0rc20 (the chips' default; 1.0.0 on A100, the only one there), SGLang 0.5.9 (its own; none on the
RTX PRO 6000). Run from the repository root:

    AIC=/path/to/aiconfigurator/.git python tools/aic_kernel_tables.py
"""

import io
import os
import subprocess
from pathlib import Path

import pandas as pd

AIC = os.environ.get("AIC", "aiconfigurator/.git")
COMMIT = "095f58a5"
ROOT = "aic-core/src/aiconfigurator_core/systems/data"
OPS = Path("framework/data/operators")
CHIPS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "l40s")
CHIPS += ("rtx_pro_6000_server",)
# engine -> kind -> (table directory, version): the one version each kind was measured at on every chip it has
# (A100: SGLang 0.5.10's Gated DeltaNet only; vLLM's KDA build 0.1.dev19262, the only one most chips have)
VERSIONS = {
    "vllm": {"gdn": ("linear_attention", "0.24.0"), "kda": ("kda", "0.1.dev19262")},
    "sglang": {"gdn": ("linear_attention", "0.5.14"), "kda": ("kda", "0.5.16")},
}
# Not converted: TensorRT-LLM 1.3.0rc20's gdn_perf (collector/trtllm/collect_gdn.py times a BF16 recurrent state and the
# convolution over the key channels only, not the kernels at the model's shape) and mamba2_perf (convolutions only)
OLDER = {("a100_sxm", "sglang", "gdn"): "0.5.10"}
# kernel_source -> role: conv_update / decode (the two decode kernels), decode_conv (one fused decode kernel with the
# convolution inside it), conv / prefill (the two prefill kernels)
ROLES = {
    "causal_conv1d_update": "conv_update",
    "fused_recurrent_gated_delta_rule_packed_decode": "decode",  # vLLM, SGLang
    "fused_recurrent_gated_delta_rule": "decode",  # TensorRT-LLM, SGLang 0.5.10
    "fused_recurrent_kda_packed_decode": "decode",
    "fused_kda_decode": "decode_conv",  # vLLM's KDA decode with its short convolutions fused
    "kda_fused_decode": "decode_conv",  # SGLang's
    "causal_conv1d_fn": "conv",
    "causal_conv1d_fn_qkv3": "conv",
    "chunk_gated_delta_rule": "prefill",
    "chunk_gated_delta_rule_flashinfer": "prefill",
    "chunk_kda": "prefill",
    "flashkda_fwd": "prefill",
    "chunk_kda_with_fused_gate": "prefill",
}
MHC_CHIPS = CHIPS[1:]  # the A100 has no mhc table
MHC_VERSIONS = {"vllm": "0.24.0", "sglang": "0.5.14", "trtllm": "1.3.0rc20"}  # the one version every chip has
MHC_COLUMNS = [
    "role",
    "version",
    "kernel",
    "num_tokens",
    "hc_mult",
    "hidden_size",
    "sinkhorn_iters",
    "num_sites",
]
MHC_COLUMNS += ["latency_ms"]
BMM_VERSIONS = {"trtllm": "1.3.0rc20", "sglang": "0.5.9"}
BMM_OLDER = {("a100_sxm", "trtllm"): "1.0.0"}
BMM_ROLES = {"mla_gen_pre": "pre", "mla_gen_post": "post"}
BMM_COLUMNS = ["role", "version", "kernel", "bmm_dtype", "num_tokens", "num_heads", "latency_ms"]
COLUMNS = ["kind", "role", "version", "kernel", "batch_size", "seq_len", "num_k_heads", "num_v_heads"]
COLUMNS += ["head_k_dim", "head_v_dim", "d_conv", "latency_ms"]


def read(path: str):
    """The parquet at `path` under ROOT of COMMIT, or None where the mirror has none."""
    got = subprocess.run(["git", "--git-dir", AIC, "show", f"{COMMIT}:{ROOT}/{path}"], capture_output=True)
    return pd.read_parquet(io.BytesIO(got.stdout)) if got.returncode == 0 else None


def convert(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The rows decodelab reads, in its schema (module docstring)."""
    df = df.assign(role=df.kernel_source.map(ROLES), kind=kind, kernel=df.kernel_source)
    decode = ["conv_update", "decode", "decode_conv"]
    gen = df.phase.eq("generation") & df.seq_len.eq(1) & df.role.isin(decode)
    pre = df.phase.eq("context") & df.batch_size.eq(1) & df.role.isin(["conv", "prefill"])
    keep = df[gen | pre]
    keep = keep.rename(columns={"latency": "latency_ms"}).dropna(subset=["latency_ms"])
    return keep[COLUMNS].sort_values(COLUMNS[:-1], kind="stable").reset_index(drop=True)


def linear_attention():
    for chip in CHIPS:
        for engine, kinds in VERSIONS.items():
            parts = []
            for kind, (folder, version) in kinds.items():
                version = OLDER.get((chip, engine, kind), version)
                df = read(f"{chip}/{folder}/{engine}/{version}/{kind}_perf.parquet")
                if df is not None:
                    parts.append(convert(df, kind))
            if parts:
                out = pd.concat(parts, ignore_index=True)
                write(
                    out,
                    f"{chip}_linear_attention_{engine}.parquet",
                    f" ({', '.join(sorted(out.kind.unique()))})",
                )


def mhc():
    for chip in MHC_CHIPS:
        for engine, version in MHC_VERSIONS.items():
            df = read(f"{chip}/mhc/{engine}/{version}/mhc_module_perf.parquet")
            if df is not None:
                df = df.rename(
                    columns={"op_name": "role", "kernel_source": "kernel", "latency": "latency_ms"}
                )
                df = df.dropna(subset=["latency_ms"])[MHC_COLUMNS].sort_values(
                    MHC_COLUMNS[:-1], kind="stable"
                )
                write(df.reset_index(drop=True), f"{chip}_mhc_{engine}.parquet")


def mla_bmm():
    for chip in CHIPS:
        for engine, version in BMM_VERSIONS.items():
            version = BMM_OLDER.get((chip, engine), version)
            df = read(f"{chip}/mla_bmm/{engine}/{version}/mla_bmm_perf.parquet")
            if df is not None:
                df = df.assign(role=df.op_name.map(BMM_ROLES), kernel=df.kernel_source, latency_ms=df.latency)
                df = df.dropna(subset=["role", "latency_ms"])[BMM_COLUMNS]
                write(
                    df.sort_values(BMM_COLUMNS[:-1], kind="stable").reset_index(drop=True),
                    f"{chip}_mla_bmm_{engine}.parquet",
                )


def write(df: pd.DataFrame, name: str, what: str = ""):
    path = OPS / name
    df.to_parquet(path, index=False)
    print(f"{path}: {len(df)} rows{what}")


if __name__ == "__main__":
    linear_attention()
    mhc()
    mla_bmm()
