"""Speculative decoding as plain quantities (no Hydra): expected tokens per round and the draft's
shape. A round = the draft proposes k tokens one at a time (k draft decode steps), then the
target verifies all k+1 positions in one pass; both pay their own costs and hold their own KV.

Acceptance models:
- i.i.d. per-token acceptance alpha: expected tokens per round = (1 - alpha^(k+1)) / (1 - alpha)
  (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", 2023);
- the Dataflow paper's acceptance ratio AR = (a + 1) / (k + 1): tokens per round = AR (k + 1).
MTP (DeepSeek-V3/R1): the draft is the target's own multi-token-prediction module, one extra
decoder layer (+ the shared LM head) per drafted token.
"""

from __future__ import annotations

import copy

METHODS = ("draft", "mtp")


def tokens_per_round(k: int, acceptance: float, ar: float = 0.0) -> float:
    """Expected tokens emitted per draft+verify round (accepted drafts + the target's token)."""
    if ar > 0.0:
        return ar * (k + 1)
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def mtp_draft(model):
    """The MTP module as a model: the target's shape with one decoder layer; DeepSeek-V3 ships
    one module and reuses it for every drafted token (each costs one pass of it)."""
    d = copy.deepcopy(model)
    d.n_layers = 1
    d.first_dense_layers = 0  # DeepSeek-V3's MTP layer is an MoE layer
    d.layer_pattern = list(getattr(model, "layer_pattern", []))[-1:]  # hybrid: the last kind
    d.name = f"{model.name}_mtp"
    return d
