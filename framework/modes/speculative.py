"""Speculative decoding (speculative.enabled): a draft model proposes k tokens, the target
verifies them in one step of k + 1 positions; tokens per round from the acceptance
(components/speculative.py). The draft runs on the target's hardware and options."""

from __future__ import annotations

import math
from typing import Dict

import numpy as np
from omegaconf import OmegaConf

from decodelab.components import speculative as spec
from decodelab.components.placement import GIB
from decodelab.core import kernel as K
from decodelab.core import kv_costs
from decodelab.core.build import Design, build
from decodelab.core.metrics import metrics
from decodelab.core.result import Result
from decodelab.errors import ConfigError, Infeasible


def draft_cfg(cfg):
    """The draft as a full config: the target's hardware, workload and options, the draft model."""
    s = cfg.speculative
    if s.method not in spec.METHODS:
        raise ConfigError(f"speculative.method={s.method!r} is not one of: {', '.join(spec.METHODS)}")
    if s.k < 1:
        raise ConfigError(f"speculative.k={s.k} must be >= 1")
    if not 0.0 <= s.acceptance <= 1.0 or not 0.0 <= s.ar <= 1.0:
        raise ConfigError(
            f"speculative.acceptance={s.acceptance} and speculative.ar={s.ar} must be in [0, 1]"
        )
    d = cfg.copy()
    OmegaConf.set_readonly(d, False)
    d.model = spec.mtp_draft(cfg.model) if s.method == "mtp" else cfg.speculative.draft
    d.speculative.enabled = False
    return d


def joint_memory(a: Dict, b: Dict) -> Dict:
    used = {n: a["used"][n] + b["used"][n] for n in a["used"]}
    for n, u in used.items():
        if u > a["capacity"][n] * (1 + 1e-9):
            raise Infeasible(
                f"target + draft do not fit memory: {u / GIB:.1f} GiB needed in {n}, "
                f"{a['capacity'][n] / GIB:.1f} GiB per chip"
            )
    return {"used": used, "capacity": a["capacity"]}


def evaluate_speculative(cfg, design: Design, keep_steps: bool) -> Result:
    s, w = cfg.speculative, cfg.workload
    draft = build(draft_cfg(cfg), host_round_trip_steps=s.k + 1)
    memory = joint_memory(design.memory, draft.memory)
    e_tok = spec.tokens_per_round(s.k, s.acceptance, s.ar)
    rounds = max(1, math.ceil((w.output_len - 1) / e_tok))
    ctx0 = w.prompt_len + 1.0 + np.arange(rounds) * e_tok  # context at each round's start
    # the target computes logits at all k + 1 verified positions; the draft at its one token
    verify = np.stack(
        [
            np.full(rounds, s.k + 1.0),
            ctx0 + s.k + 1,
            np.full(rounds, w.batch_size),
            np.full(rounds, s.k + 1.0),
            np.zeros(rounds),
        ],
        1,
    )
    drafting = np.stack(
        [
            np.ones(rounds * s.k),
            (ctx0[:, None] + 1 + np.arange(s.k)).ravel(),
            np.full(rounds * s.k, w.batch_size),
            np.ones(rounds * s.k),
            np.zeros(rounds * s.k),
        ],
        1,
    )
    verify = kv_costs.attended_rows(verify, w.prompt_len, design)
    drafting = kv_costs.attended_rows(drafting, w.prompt_len, draft)
    pre = K.request_steps(w.batch_size, w.prompt_len, 2)[:1]
    t_pre = K.simulate(*design.arrays(), pre)[0] + K.simulate(*draft.arrays(), pre)[0]
    t_pre = t_pre + w.batch_size * design.kv_prefill_s  # KV-policy selection at prefill
    t_ver = K.simulate(*design.arrays(), verify)
    t_dra = K.simulate(*draft.arrays(), drafting).reshape(rounds, s.k, len(K.CAUSES)).sum(1)
    per_round = t_ver + t_dra
    tokens = rounds * e_tok
    m = metrics(cfg, design, t_pre, per_round.sum(0), tokens, float(ctx0.mean() + e_tok / 2), memory)
    m["spec_tokens_per_round"] = e_tok
    m["spec_draft_time_share"] = float(t_dra.sum() / per_round.sum())
    res = Result("ok", metrics=m, notes=design.notes + draft.notes)
    if keep_steps:
        res.steps = np.vstack([pre, verify])
        res.times = np.vstack([t_pre[None, :], per_round])
    return res
