"""Disaggregated rows of `decodelab validate` (AIConfigurator's `mode` disagg, read by
framework/runs/aic_rows.py into the columns `prefill_*` / `decode_*`: workers, tp, pp, dp,
moe_tp, moe_ep, batch): each row's pools as conf/disagg pools (modes/serving/disagg.py) and the
launch settings of each pool's engine.

A pool of `workers` instances of tp x dp GPUs runs its attention in dp data-parallel groups and
its experts moe_tp x moe_ep ways (the aggregated rows' mapping, validation.parallel_overrides);
its batch size, per attention-DP rank, is the batch cap of each rank (`disagg.<pool>.max_batch`):
the row's own (concurrency = decode workers x dp x batch as recorded), or its recipe's where a dump
records clients per rank (aic_recipes.recorded_settings). The KV crosses InfiniBand: every mapped
row's deployment spans two or more 8-GPU nodes and which GPUs share a node is not recorded
(conf/disagg/ib_1p1d.yaml: 400 Gb/s per GPU, one ConnectX-7 per GPU in DGX H100, H200 and B200)."""

from __future__ import annotations

from typing import Dict, List

SIDES = ("prefill", "decode")
KV_LINK = "ib_1p1d"  # conf/disagg file of the KV link (module docstring)
# The benchmark launch rules of AIConfigurator's generator for disaggregated pools (rule_plugin/
# benchmark/{trtllm,vllm,sglang}.rule, aiconfigurator @71bb3d00e 2026-01-30, unchanged in what is used
# here at @095f58a5): max_batch_size = the pool's batch size (prefill 1 unless given); CUDA graphs for
# every batch 1..max_batch_size (no padded decode batch); TensorRT-LLM prefill: overlap scheduler off
# (disable_overlap_scheduler true), max_num_tokens isl + 1500; decode: overlap on, max_num_tokens
# max_batch_size (rounded up to tokens_per_block from 2026-02-25, #453: no decode step is bound by
# it either way); vLLM prefill max_num_batched_tokens isl + 1500, decode max_batch_size; SGLang
# max_prefill_tokens isl + 1500 on both (no mixed chunk outside aggregated workers). With MTP (k draft tokens) a
# decode step carries batch x (1 + k) tokens: AIConfigurator's generator set max_num_tokens = bs x (1 + nextn) (+ isl
# + 1500, generator/backends/trtllm.py _apply_deepseek_mtp @8d0390b2), InferenceX's recipes likewise (srt-slurm
# ctx1_gen2_dep8_batch768_eplb0_mtp2_1600.yaml: decode max_batch_size 96, max_num_tokens 288 = 96 x 3), so a decode
# pool's budget is batch x (1 + k) (SGLang's: at least that; its decode steps are not bound by max_prefill_tokens).
PREFILL_TOKENS_OVER_ISL = 1500


def is_disagg(row) -> bool:
    """Whether a row (aic_rows.to_row's) is a disaggregated deployment."""
    return str(row.get("mode", "")).strip().lower() == "disagg"


def pool_overrides(row, is_moe: bool) -> List[str]:
    """The row's pools as overrides of its design (composed once per distinct deployment)."""
    out = [f"disagg={KV_LINK}"]
    for side in SIDES:
        v = {k: int(row[f"{side}_{k}"]) for k in ("workers", "tp", "dp")}
        out += [
            f"disagg.{side}.instances={v['workers']}",
            f"disagg.{side}.tensor_parallel={v['tp'] * v['dp']}",
            f"disagg.{side}.attention_dp={v['dp']}",
        ]
        if is_moe:
            moe_tp, moe_ep = int(row[f"{side}_moe_tp"]), int(row[f"{side}_moe_ep"])
            mapping = "ep" if moe_ep > 1 else "tp"  # moe_ep groups of moe_tp GPUs where both > 1
            out += [
                f"disagg.{side}.moe_mapping={mapping}",
                f"disagg.{side}.moe_ep={moe_ep if moe_tp > 1 and moe_ep > 1 else 0}",
            ]
    return out


def pool_engine(
    family: str, side: str, batch: int, isl: int, k: int = 0, tokens: int = 0
) -> Dict[str, object]:
    """The engine settings AIConfigurator's benchmark launch gives one pool (module constants);
    `k`: the pool's MTP draft tokens per step; `tokens`: a prefill step's budget the row's recipe
    states (aic_recipes.prefill_step; 0 = the launch rule's isl + 1500)."""
    budget = tokens or isl + PREFILL_TOKENS_OVER_ISL
    decode = batch * (1 + k)
    if family == "trtllm":
        return (
            {"overlap": False, "max_tokens_per_step": budget}
            if side == "prefill"
            else {"max_tokens_per_step": decode}
        )
    if family == "vllm":
        tokens = budget if side == "prefill" else decode
        return {"max_tokens_per_step": tokens, "chunk_size": tokens, "batch_buckets": []}
    if family == "sglang":
        return {
            "max_tokens_per_step": budget if side == "prefill" else max(budget, decode),
            "batch_buckets": [],
        }
    return {}


def _count(row, col: str) -> int:
    v = row.get(col)
    return 0 if v is None or v != v or v == "" else int(v)


def draft_tokens(row, side: str) -> int:
    """The pool's MTP draft tokens per step (`<side>_mtp`: aic_recipes.draft_tokens; empty: 0)."""
    return _count(row, f"{side}_mtp")


def backend(row, side: str, key: str = "moe_backend") -> str:
    """The pool's MoE backend (or, `key` gemm_backend_fp8_block / allreduce_norm, its block-scaled FP8
    GEMM kernel / fused all-reduce + norm kernel) its recipe states (`<side>_<key>`:
    aic_recipes.pool_backends; empty: the engine file's)."""
    v = row.get(f"{side}_{key}")
    return v if isinstance(v, str) else ""


def mem_fraction(row, side: str, family: str = "sglang") -> Dict[str, object]:
    """The pool's KV pool as its recipe sizes it (`<side>_mem_fraction`: aic_recipes.mem_fractions):
    SGLang's --mem-fraction-static, that share of the GPU for weights and KV, no start-up profile;
    TensorRT-LLM's free_gpu_memory_fraction, that share of what the weights and the start-up
    profile leave; {} (the engine file's) where none is stated."""
    v = row.get(f"{side}_mem_fraction")
    if v is None or v != v or v == "":
        return {}
    if family == "trtllm":
        return {"kv_mem_basis": "free", "kv_mem_fraction": float(v)}
    return {"kv_mem_basis": "total", "profile_reserve": False, "kv_mem_fraction": float(v)}


def pool_settings(row, family: str, aic: bool) -> Dict[str, object]:
    """Per-row fields of a disaggregated design: each pool's batch cap, its MTP draft length
    (engine.mtp.k, the same under attention DP: the recipe states it for its pool), the MoE backend,
    block-scaled FP8 GEMM kernel, fused all-reduce + norm and memory share its recipe states (for
    every weight dtype and attention mapping: one per pool), and under AIConfigurator's launch
    (`aic`) its engine settings."""
    out: Dict[str, object] = {}
    for side in SIDES:
        batch, k = int(row[f"{side}_batch"]), draft_tokens(row, side)
        out[f"disagg.{side}.max_batch"] = batch
        tokens = _count(row, "prefill_tokens") if side == "prefill" else 0  # aic_recipes.prefill_step
        engine = pool_engine(family, side, batch, int(row["isl"]), k, tokens) if aic else {}
        if k > 0:
            engine.update({"mtp.k": k, "mtp.k_attention_dp": k})
        moe = backend(row, side)
        if moe:
            engine.update({f"moe_backend{s}": moe for s in ("", "_attention_dp", "_fp8_block")})
        if gemm := backend(row, side, "gemm_backend_fp8_block"):
            engine["gemm_backend_fp8_block"] = gemm
        if backend(row, side, "allreduce_norm"):
            engine["allreduce_norm"] = True
        engine.update(mem_fraction(row, side, family))
        if engine:
            out[f"disagg.{side}.engine"] = engine
    return out
