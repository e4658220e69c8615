"""KV-policy and layer-kind costs the kernel's caps do not carry, as plain data on the Design:

- `read_model` (vector, ReadModel): how many KV token-equivalents a decode row attends per sequence,
  layer-averaged, given the tokens the policy stores: the caps (kernel.attended_tokens), plus
  Quest's page metadata and dense layers, plus H2O's score traffic (token-equivalents), mixed
  over full / sliding-window / constant-state layers (hybrid models);
- `kv_prefill_s` (vector by kernel cause): seconds per sequence of the policy's selection at
  prefill (SnapKV scoring, H2O accumulation, Quest page bounds), added to the prefill row (TTFT);
- `max_batch`: sequences whose KV slot (static capacity, or the cache at the end of the
  request) fits in HBM next to the weights, per chip of a tensor-parallel replica.

Formulas: docs/kv_policies.md, "How a policy enters the model" and "Policies". Components know
nothing of this module; the kernel neither.
"""

from __future__ import annotations

import math
from typing import Dict

import numpy as np

from decodelab.core import kernel as K
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES, Cap, Cause, Layout, Step

# read_model's vector rm[ReadModel.*]: the policy's read coefficients (dense layers' share, page
# metadata per page, page size, extra token-equivalents per stored token) and the layer mix (the
# full / sliding-window / constant-state layers' shares, the window, the state in tokens; sparse
# attention's share of the cache read for the top-k only, held whole, and its top-k: dsa.py)
ReadModel = Layout(
    "ReadModel",
    "DENSE",
    "META",
    "PAGE",
    "EXTRA",
    "FULL",
    "SLIDE",
    "WINDOW",
    "STATE",
    "STATE_TOK",
    "SPARSE",
    "TOPK",
)
GIB = float(2**30)


def check_policy(policy, pol, m) -> None:
    errors = policy.check(pol, m)
    if errors:
        raise ConfigError("\n".join(errors))


def layer_mix(arch, m, kb: float, tp: int = 1) -> Dict[str, float]:
    """The architecture's layer mix of the bytes one chip of `tp` (the attention's tensor parallel) caches."""
    if hasattr(arch, "kv_layer_mix"):
        return arch.kv_layer_mix(m, kb, tp)
    return {"full": 1.0, "sliding": 0.0, "state": 0.0, "window": 0.0, "state_tokens": 0.0}


def _sparse(mix: Dict[str, float]) -> Dict[str, float]:
    return {"sparse": mix.get("sparse", 0.0), "topk": mix.get("topk", 0.0)}


def read_model(policy, pol, arch, m, kb: float, tp: int = 1) -> np.ndarray:
    """The ReadModel vector: the policy's read coefficients (Quest: dense layers, page metadata),
    H2O's score bytes converted to tokens, and the architecture's layer mix."""
    rc = policy.read_coeffs(pol, m)
    kv_tok = arch.kv_bytes_per_token(m, kb)
    mix = layer_mix(arch, m, kb, tp)
    extra = policy.decode_overhead_bytes(pol, m, 1.0) / kv_tok if kv_tok else 0.0
    layers = {"full": mix["full"], "slide": mix["sliding"], "state": mix["state"], "window": mix["window"]}
    return ReadModel.vector(
        {**rc, **layers, **_sparse(mix), "extra": extra, "state_tok": mix["state_tokens"]}
    )


def effective_tokens(stored: np.ndarray, caps: np.ndarray, rm: np.ndarray) -> np.ndarray:
    """Layer-averaged KV token-equivalents one decode step reads per sequence holding `stored`."""
    stored = np.asarray(stored, dtype=np.float64)
    cap = caps[Cap.READ_CAP]
    r = np.minimum(stored, cap) if cap > 0 else stored.copy()
    r = rm[ReadModel.DENSE] * stored + (1.0 - rm[ReadModel.DENSE]) * r
    if rm[ReadModel.PAGE] > 0:
        r = r + rm[ReadModel.META] * np.ceil(stored / rm[ReadModel.PAGE])
    r = r + rm[ReadModel.EXTRA] * stored
    out = rm[ReadModel.FULL] * r + rm[ReadModel.STATE] * rm[ReadModel.STATE_TOK]
    if rm[ReadModel.SLIDE] > 0:
        out = out + rm[ReadModel.SLIDE] * np.minimum(r, rm[ReadModel.WINDOW])
    if rm[ReadModel.SPARSE] > 0:
        out = out + rm[ReadModel.SPARSE] * np.minimum(r, rm[ReadModel.TOPK])
    return out


def memory_fraction(tokens: float, rm: np.ndarray) -> float:
    """Layer-averaged tokens held when full layers hold `tokens` (sliding layers hold at most the
    window, state layers their state; sparse attention's latent: all of them)."""
    return (
        (rm[ReadModel.FULL] + rm[ReadModel.SPARSE]) * tokens
        + rm[ReadModel.SLIDE] * min(tokens, rm[ReadModel.WINDOW])
        + rm[ReadModel.STATE] * rm[ReadModel.STATE_TOK]
    )


def attended_rows(steps: np.ndarray, prompt_len: float, design) -> np.ndarray:
    """Rows whose Step.CTX holds the context reached -> the KV token-equivalents each attends.
    Prefill rows (context within the prompt) attend everything, as kernel.attended_tokens."""
    caps = design.kv_caps
    out = K.apply_caps(steps, prompt_len, caps)
    rm = getattr(design, "kv_read_model", None)
    if rm is None:
        return out
    ctx = steps[:, Step.CTX]
    dec = ctx > prompt_len
    if not dec.any():
        return out
    kept = min(prompt_len, caps[Cap.PROMPT_CAP]) if caps[Cap.PROMPT_CAP] > 0 else prompt_len
    stored = kept + (ctx[dec] - prompt_len)
    if caps[Cap.TOTAL_CAP] > 0:
        stored = np.minimum(stored, caps[Cap.TOTAL_CAP])
    out[dec, Step.CTX] = effective_tokens(stored, caps, rm)
    return out


def slot_tokens(policy, pol, m, prompt_len: int, output_len: int) -> float:
    """Tokens one sequence's slot reserves: a static slot's capacity (allocated whole, however
    full), else what the cache holds at the end of the request."""
    if policy.slot_layout(pol) == "static":
        return float(policy.slot_capacity(pol, m))
    return float(policy.cached_tokens(pol, prompt_len, output_len, m))


def attention_efficiency(hw) -> float:
    """Fraction of peak FLOP/s attention's (query, key) work reaches (flash-attention kernels
    reach less than GEMMs); unset (0) = the GEMM fraction `compute_eff_max`."""
    return hw.attn_compute_eff_max if hw.attn_compute_eff_max > 0 else hw.compute_eff_max


def prefill_seconds(
    policy, pol, m, prompt_len: int, tp: int, hw, peak_flops: float, hbm_bw: float, kb: float, ab: float
) -> np.ndarray:
    """Seconds by cause per sequence of the policy's prefill selection on one chip: heads split
    tp ways; the KV it reads is replicated when tp exceeds the KV heads (MLA: 1 latent), so the
    bytes are scaled by that replication (conservative for the score terms). Roofline per chip
    at the machine's eff_max (the compute part is query-key scoring: the attention efficiency);
    the excess over the ideal time is reported as `excess`."""
    out = np.zeros(len(CAUSES))
    c = policy.prefill_overhead(pol, m, prompt_len, kb, ab)
    if c["flops"] <= 0 and c["bytes"] <= 0:
        return out
    hkv = 1 if getattr(m, "kv_lora_rank", 0) > 0 else m.n_kv_heads
    repl = max(hkv // tp, 1) * tp / hkv
    mem_i = c["bytes"] / tp * repl / hbm_bw
    comp_i = c["flops"] / tp / peak_flops
    ach = max(mem_i / hw.bw_eff_max, comp_i / attention_efficiency(hw))
    out[Cause.MEMORY if mem_i >= comp_i else Cause.COMPUTE] = max(mem_i, comp_i)
    out[Cause.EXCESS] = ach - max(mem_i, comp_i)
    return out


def state_pool_kind(state_seq: float, engine) -> str:
    """Where the linear layers' states (`state_seq` bytes per sequence, per chip) take their memory:
    `ratio`, a pool of their own split from the KV pool by engine.state_pool_ratio r (SGLang: state / KV
    = r, model_runner_kv_cache_mixin.handle_max_mamba_cache); `max_batch`, one state per sequence the
    engine may run (engine.max_batch); `none`, no states, or each held sequence takes its state from the
    KV pool itself (engine.state_in_kv_pool: the serving kernel's Eng.STATE_TOKENS)."""
    if state_seq <= 0.0 or getattr(engine, "state_in_kv_pool", False):
        return "none"
    return "ratio" if getattr(engine, "state_pool_ratio", 0.0) > 0.0 else "max_batch"


def less_state_pool(pool: float, state_seq: float, engine) -> float:
    """A serving engine's KV pool once the linear layers' states have their memory (state_pool_kind);
    `pool` unchanged where they take none of their own."""
    kind = state_pool_kind(state_seq, engine)
    if kind == "ratio":
        return pool / (1.0 + engine.state_pool_ratio)
    if kind == "max_batch":
        return max(0.0, pool - engine.max_batch * state_seq)
    return pool


def max_batch(hbm_capacity: float, weights_chip: float, slot_bytes_chip: float) -> int:
    """Sequences whose KV slot fits in the HBM left after the weights (per chip)."""
    free = hbm_capacity - weights_chip
    if free <= 0 or slot_bytes_chip <= 0:
        return 0
    return int(math.floor(free / slot_bytes_chip * (1 + 1e-12)))


def policy_metrics(design, batch: int, ttft_s: float) -> Dict[str, float]:
    """Metrics of the KV policy for the result: the batch run (batch_fill resolves it), max batch,
    slot size, selection time per sequence and the whole batch's selection as % of TTFT."""
    sel = float(np.sum(design.kv_prefill_s))
    return {
        "batch_size": float(batch),
        "max_batch": float(design.max_batch),
        "kv_slot_gib_per_chip": design.kv_slot_bytes_chip / GIB,
        "kv_slot_gib_model": design.kv_slot_bytes_model / GIB,
        "ttft_kv_select_ms": sel * 1e3,
        "kv_select_pct_ttft": 100.0 * batch * sel / ttft_s if ttft_s > 0 else 0.0,
    }


def attended_at(design, prompt_len: float, ctx: float) -> float:
    """KV token-equivalents a decode step at context `ctx` attends (one sequence)."""
    row = np.array([[1.0, ctx, 1.0]])
    return float(attended_rows(row, prompt_len, design)[0, Step.CTX])
