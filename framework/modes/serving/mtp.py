"""In-engine MTP speculative decoding in serving runs (`engine.mtp`; the scheduler's rule:
framework/modes/serving/scheduler.py docstring, its step cost: stepcost.py).

An engine launched with the model's multi-token-prediction module as its draft (TensorRT-LLM
`speculative_config: {decoding_type: MTP, num_nextn_predict_layers: k}`, SGLang `--speculative-
algorithm EAGLE|NEXTN --speculative-num-steps k`) verifies, per decoding sequence and step, its
last token and k drafted ones, and emits the accepted prefix plus the target's own next token:
E = 1 + p1 + p1 p2 + ... + p1...pk tokens on average, p_j the conditional acceptance of draft
position j (`model.mtp_acceptance`, a public per-model figure; components/speculative.py).

Here: the draft k of a run (engine.mtp.k, or k_attention_dp under data-parallel attention; 0 for
a model without an MTP module), the draft design (the target's shape with one decoder layer,
components/speculative.mtp_draft, on the target's chips), what it takes from memory (its layer's
weights beside the target's, its layer's KV in the same pool: TensorRT-LLM sizes the pool with the
MTP layers' KV, get_num_spec_layers) and the engine-vector slots."""

from __future__ import annotations

from typing import Tuple

from decodelab.components import speculative as spec
from decodelab.components.models.layers import param_counts
from decodelab.core import parallel
from decodelab.core.build import Design, build
from decodelab.errors import ConfigError
from decodelab.modes.resolve import with_fields


def draft_k(cfg) -> int:
    """Draft tokens per step of this run: engine.mtp.k (k_attention_dp, where set, when the run's
    attention is split in data-parallel groups); 0 when the model ships no MTP module."""
    m = getattr(cfg.engine, "mtp", None)
    if m is None or not int(getattr(cfg.model, "n_mtp_modules", 0) or 0):
        return 0
    k = int(m.k)
    if parallel.serving_groups(cfg) > 1 and int(m.k_attention_dp) > 0:
        k = int(m.k_attention_dp)
    if k < 0:
        raise ConfigError(f"engine.mtp.k={k} must be >= 0 (0: no MTP speculative decoding)")
    return k


def engine_slots(cfg) -> Tuple[float, float]:
    """(Eng.SPEC_K, Eng.SPEC_TOK): the draft tokens per step and the tokens a decoding sequence emits
    per step (1 without MTP)."""
    k = draft_k(cfg)
    if k == 0:
        return 0.0, 1.0
    acc = list(getattr(cfg.model, "mtp_acceptance", None) or [])
    if not acc:
        raise ConfigError(
            f"engine.mtp.k={k} needs model.mtp_acceptance (the conditional acceptance of each draft "
            f"position, a public figure for {cfg.model.name}): none given"
        )
    return float(k), spec.mtp_tokens_per_step(acc, k)


def draft_cfg(cfg):
    """The MTP module as a design of its own: the target's config with the one-layer draft model
    (components/speculative.mtp_draft) and no MTP of its own."""
    return with_fields(cfg, {"model": spec.mtp_draft(cfg.model), "engine.mtp.k": 0})


def draft_reserve(cfg, draft: Design) -> float:
    """HBM bytes per chip the MTP module holds beside the target's weights: the draft design's
    weights less the embedding and LM head it shares with the target, taken as their share of
    the module's parameters plus them (components/models/layers.param_counts `mtp`)."""
    pc = param_counts(cfg.model)
    shared = pc["embed"] + pc["lm_head"]
    layer = pc["mtp"] / max(int(cfg.model.n_mtp_modules), 1)
    return draft.weights_chip * layer / max(layer + shared, 1.0)


def designs(cfg) -> Tuple[Design, Design]:
    """(target, draft) for a serving run with MTP: the target placed beside the module's weights,
    its KV bytes per token with the module's layer (one pool holds both)."""
    dcfg = draft_cfg(cfg)
    draft = build(dcfg)
    held = draft_reserve(cfg, draft)
    design = build(cfg, reserved={"hbm": held})
    # the engine's pool (core/kv_pool.kv_pool_bytes) sized with the module's weights among the
    # weights: a kv_mem_fraction share of them under kv_mem_basis free, all of them otherwise
    share = cfg.engine.kv_mem_fraction if cfg.engine.kv_mem_basis == "free" else 1.0
    design.memory["kv_pool_bytes"] = max(0.0, design.memory["kv_pool_bytes"] - share * held)
    per_tok = design.memory.get("kv_bytes_per_token_chip")
    if per_tok is None:
        per_tok = sum(op.kv_write_per_token * op.repeat for op in design.ops)
    d_tok = sum(op.kv_write_per_token * op.repeat for op in draft.ops)
    design.memory["kv_bytes_per_token_chip"] = float(per_tok) + float(d_tok)
    design.notes.append(
        f"MTP speculative decoding in the engine: k = {draft_k(cfg)} draft tokens per step, "
        f"{engine_slots(cfg)[1]:.3f} tokens per step (model.mtp_acceptance); the MTP module "
        f"({held / 2**30:.2f} GiB per chip) and its layer's KV beside the target's"
    )
    return design, draft
