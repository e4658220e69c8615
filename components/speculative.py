"""Speculative decoding as plain quantities (no Hydra): expected tokens per round, the pair's
acceptance, where the draft runs and what moving tokens between draft and target costs. A round =
the draft proposes k tokens one at a time (k draft decode steps), then the target verifies all
k+1 positions in one pass; both pay their own costs and hold their own KV.

Acceptance models:
- i.i.d. per-token acceptance alpha: expected tokens per round = (1 - alpha^(k+1)) / (1 - alpha)
  (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", 2023);
- the Dataflow paper's acceptance ratio AR(k) = (a + 1) / (k + 1) when a of k drafted tokens are
  accepted: tokens per round = AR(k) (k + 1). A measured AR(k) is a property of the (target,
  draft, dataset) triple and of k; the i.i.d. form cannot express a measured curve, so a pair may
  give AR per k (`pairs[<target>__<draft>].ar`, keys "k<k>") besides its i.i.d. alpha.
One value per pair serves every figure the pair appears in (never one per figure).
MTP (DeepSeek-V3/R1): the draft is the target's own multi-token-prediction module, one extra
decoder layer (+ the shared LM head) per drafted token.

Draft placement: the draft need not use the target's tensor-parallel degree (a 24-head draft
cannot be split 16 ways). It runs on `draft_tp` of the target's chips, `draft_copies` copies side
by side (each drafts batch / copies sequences); when its chip group differs from the target's,
every round moves tokens twice (the draft's k tokens to the target, the verified tokens back),
each one transfer of `collective_latency_us` plus its bytes over the chip link.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

METHODS = ("draft", "mtp")
ACCEPTANCE_FROM = ("pairs", "config")
TOKEN_ID_BYTES = 4.0  # one int32 token id


def tokens_per_round(k: int, acceptance: float, ar: float = 0.0) -> float:
    """Expected tokens emitted per draft+verify round (accepted drafts + the target's token)."""
    if ar > 0.0:
        return ar * (k + 1)
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def pair_key(target: str, draft: str) -> str:
    return f"{target}__{draft}"


def pair_acceptance(s, target: str, draft: str) -> Tuple[float, float, str]:
    """(acceptance, ar, where it came from) for this pair at s.k: the pair's measured AR(k) if the
    table has that k, else its i.i.d. alpha, else the config's acceptance / ar."""
    pair = (s.pairs or {}).get(pair_key(target, draft)) if s.acceptance_from == "pairs" else None
    if pair is not None:
        ar_k = (pair.ar or {}).get(f"k{s.k}", 0.0)
        if ar_k > 0:
            return 0.0, float(ar_k), f"pair {pair_key(target, draft)}: AR({s.k}) = {ar_k} ({pair.source})"
        if pair.acceptance > 0:
            return (
                float(pair.acceptance),
                0.0,
                f"pair {pair_key(target, draft)}: alpha = {pair.acceptance} ({pair.source})",
            )
    return float(s.acceptance), float(s.ar), "speculative.acceptance / speculative.ar (no pair value)"


def shardable(m, tp: int) -> bool:
    """The draft model splits `tp` ways (heads, KV heads or their replication, FFN columns)."""
    kv_ok = m.n_kv_heads % tp == 0 or tp % m.n_kv_heads == 0
    return m.n_heads % tp == 0 and kv_ok and m.ffn_dim % tp == 0


def draft_parallelism(m, target_tp: int, draft_tp: int, copies: int) -> Tuple[int, int, Optional[str]]:
    """(draft_tp, copies, problem): auto (draft_tp = 0) is the target's degree when the draft
    splits that way, else the largest degree below it that does (its chips are a subset of the
    target's). Explicit values are checked: copies x draft_tp chips must lie within the target's."""
    if copies < 1:
        return draft_tp, copies, f"speculative.draft_copies={copies} must be >= 1"
    if draft_tp < 0:
        return draft_tp, copies, f"speculative.draft_tp={draft_tp} must be >= 0 (0: auto)"
    if draft_tp == 0:
        draft_tp = next(t for t in range(target_tp, 0, -1) if shardable(m, t))
    if draft_tp * copies > target_tp:
        return (
            draft_tp,
            copies,
            (
                f"speculative.draft_tp={draft_tp} x draft_copies={copies} chips exceed the target's "
                f"tensor_parallel={target_tp} chips the draft shares"
            ),
        )
    return draft_tp, copies, None


def handoff_seconds(same_group: bool, k: int, batch: int, latency_s: float, link_bw: float) -> float:
    """Moving tokens between draft and target in one round: nothing when the draft runs on the
    target's own chip group (the tokens are already where both need them); else two transfers,
    the k drafted ids of every sequence to the target and the up to k + 1 verified ids back, each
    one link latency plus its bytes."""
    if same_group:
        return 0.0
    ids = (k + (k + 1)) * batch * TOKEN_ID_BYTES
    return 2.0 * latency_s + ids / link_bw


def copy_batch(batch: int, copies: int) -> int:
    """Sequences one draft copy drafts (the copies run side by side)."""
    return math.ceil(batch / copies)


def mtp_draft(model):
    """The MTP module as a model: the target's shape with one decoder layer; DeepSeek-V3 ships
    one module and reuses it for every drafted token (each costs one pass of it)."""
    return {
        **model,
        "n_layers": 1,
        "first_dense_layers": 0,  # DeepSeek-V3's MTP layer is an MoE layer
        "layer_pattern": list(model.get("layer_pattern") or [])[-1:],  # hybrid: the last kind
        **_mtp_ratio(model),
        "name": f"{model.name}_mtp",
    }


def _mtp_ratio(model) -> dict:
    """DeepSeek-V4's MTP layer attends with its own compress_ratios entry, the one after the main
    layers' (0: the window only; reference inference/model.py MTPBlock)."""
    ratios = list(model.get("compress_ratios") or [])
    if not ratios:
        return {}
    n = int(model.n_layers)
    return {"compress_ratios": [ratios[n] if len(ratios) > n else 0]}


def mtp_tokens_per_step(acceptance, k: int) -> float:
    """Expected tokens a sequence emits per step of MTP speculative decoding with k draft tokens:
    the target's own token plus the accepted prefix of the drafts, 1 + p1 + p1 p2 + ... +
    p1 p2 ... pk, p_j = acceptance[j - 1] the acceptance of draft position j given the ones before
    it were accepted (chain drafting; positions past the list take its last value)."""
    if k < 1:
        return 1.0
    if not acceptance:
        raise ValueError("mtp_tokens_per_step needs at least one acceptance value")
    total, run = 1.0, 1.0
    for j in range(k):
        p = float(acceptance[min(j, len(acceptance) - 1)])
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"acceptance {p} of draft position {j + 1} must be in [0, 1]")
        run *= p
        total += run
    return total
