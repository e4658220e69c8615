"""Speculative decoding (speculative.enabled): a draft model proposes k tokens, the target
verifies them in one step of k + 1 positions; tokens per round from the pair's acceptance
(components/speculative.py). The draft runs on its own tensor-parallel degree and copies
(speculative.draft_tp / draft_copies, within the target's chips), with the target's hardware and
options; memory is placed jointly (both models' weights, then the target's KV, then the draft's,
under workload.kv_placement)."""

from __future__ import annotations

import math
from typing import Dict

import numpy as np

from decodelab.components import speculative as spec
from decodelab.components.placement import GIB
from decodelab.core import kernel as K
from decodelab.core import kv_costs
from decodelab.core.build import Design, build
from decodelab.core.metrics import metrics
from decodelab.core.result import Result
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.resolve import with_fields
from decodelab.kernel_layout import CAUSES


def _check(s) -> None:
    if s.method not in spec.METHODS:
        raise ConfigError(f"speculative.method={s.method!r} is not one of: {', '.join(spec.METHODS)}")
    if s.k < 1:
        raise ConfigError(f"speculative.k={s.k} must be >= 1")
    if not 0.0 <= s.acceptance <= 1.0 or not 0.0 <= s.ar <= 1.0:
        raise ConfigError(
            f"speculative.acceptance={s.acceptance} and speculative.ar={s.ar} must be in [0, 1]"
        )
    if s.acceptance_from not in spec.ACCEPTANCE_FROM:
        raise ConfigError(
            f"speculative.acceptance_from={s.acceptance_from!r} is not one of: {', '.join(spec.ACCEPTANCE_FROM)}"
        )
    for key, p in (s.pairs or {}).items():
        bad = [
            f"ar.{k}={v}"
            for k, v in (p.ar or {}).items()
            if not (k[:1] == "k" and k[1:].isdigit() and 0 < v <= 1)
        ]
        if not 0.0 <= p.acceptance <= 1.0 or bad:
            raise ConfigError(
                f"speculative.pairs.{key}: acceptance={p.acceptance} must be in [0, 1] and ar keys "
                f"k<int> with values in (0, 1]; bad: {', '.join(bad) or 'acceptance'}"
            )


def draft_cfg(cfg):
    """The draft as a full config: the target's hardware, workload and options, the draft model,
    on its own tensor-parallel degree with batch / copies sequences per copy."""
    s = cfg.speculative
    _check(s)
    model = spec.mtp_draft(cfg.model) if s.method == "mtp" else cfg.speculative.draft
    fields = {"model": model, "speculative.enabled": False}
    if s.method == "draft":
        tp, copies, problem = spec.draft_parallelism(
            model, cfg.hardware.tensor_parallel, s.draft_tp, s.draft_copies
        )
        if problem:
            raise ConfigError(problem)
        fields["hardware.tensor_parallel"] = tp
        fields["workload.batch_size"] = spec.copy_batch(cfg.workload.batch_size, copies)
    return with_fields(cfg, fields)


def joint_memory(a: Dict, b: Dict) -> Dict:
    used = {n: a["used"][n] + b["used"][n] for n in a["used"]}
    for n, u in used.items():
        if u > a["capacity"][n] * (1 + 1e-9):
            raise Infeasible(
                f"target + draft do not fit memory: {u / GIB:.1f} GiB needed in {n}, "
                f"{a['capacity'][n] / GIB:.1f} GiB per chip"
            )
    return {"used": used, "capacity": a["capacity"]}


def place_pair(cfg, dcfg, trip: int):
    """Target and draft designs placed jointly on the chips they share: both models' weights in
    HBM first, then the target's KV, then the draft's (each under workload.kv_placement)."""
    alone = build(dcfg, host_round_trip_steps=trip)
    design = build(cfg, host_round_trip_steps=trip, reserved={"hbm": alone.weights_chip})
    draft = build(dcfg, host_round_trip_steps=trip, reserved=design.memory["used"])
    return design, draft


def _ideal_seconds(d: Design, batch: int, prompt_len: float, ctx: float) -> float:
    """Dataflow paper Eq. 3's bound for one step of design d: the weights it streams plus each
    sequence's KV at context ctx, over its chips' HBM bandwidth."""
    kv = d.kv_bytes_per_token * kv_costs.attended_at(d, prompt_len, ctx)
    return (d.weight_bytes_streamed + batch * kv) / d.hbm_bw_total


def evaluate_speculative(cfg, design: Design, keep_steps: bool) -> Result:
    s, w, hw = cfg.speculative, cfg.workload, cfg.hardware
    dcfg = draft_cfg(cfg)
    design, draft = place_pair(cfg, dcfg, s.k + 1)
    memory = joint_memory(design.memory, draft.memory)
    target_name = cfg.model.name
    draft_name = dcfg.model.name if s.method == "draft" else f"{target_name}_mtp"
    acc, ar, acc_src = spec.pair_acceptance(s, target_name, draft_name)
    e_tok = spec.tokens_per_round(s.k, acc, ar)
    rounds = max(1, math.ceil((w.output_len - 1) / e_tok))
    ctx0 = w.prompt_len + 1.0 + np.arange(rounds) * e_tok  # context at each round's start
    b_draft = dcfg.workload.batch_size  # per draft copy
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
            np.full(rounds * s.k, b_draft),
            np.ones(rounds * s.k),
            np.zeros(rounds * s.k),
        ],
        1,
    )
    verify = kv_costs.attended_rows(verify, w.prompt_len, design)
    drafting = kv_costs.attended_rows(drafting, w.prompt_len, draft)
    pre = K.request_steps(w.batch_size, w.prompt_len, 2)[:1]
    pre_d = K.request_steps(b_draft, w.prompt_len, 2)[:1]
    t_pre = K.simulate(*design.arrays(), pre)[0] + K.simulate(*draft.arrays(), pre_d)[0]
    t_pre = t_pre + w.batch_size * design.kv_prefill_s  # KV-policy selection at prefill
    t_ver = K.simulate(*design.arrays(), verify)
    t_dra = K.simulate(*draft.arrays(), drafting).reshape(rounds, s.k, len(CAUSES)).sum(1)
    same_group = dcfg.hardware.tensor_parallel == hw.tensor_parallel
    t_hand = spec.handoff_seconds(
        same_group, s.k, w.batch_size, hw.collective_latency_us * 1e-6, max(hw.link_bw_gb_s, 1e-9) * 1e9
    )
    per_round = t_ver + t_dra
    per_round[:, CAUSES.index("collectives")] += t_hand
    tokens = rounds * e_tok
    mean_ctx = float(ctx0.mean() + e_tok / 2)
    m = metrics(cfg, design, t_pre, per_round.sum(0), tokens, mean_ctx, memory)
    # roofline share of a round: the round's ideal time (the target's verify step and k draft
    # steps, each streaming its weights and KV at full HBM bandwidth) over its simulated time
    ideal = _ideal_seconds(design, w.batch_size, w.prompt_len, mean_ctx) + s.k * _ideal_seconds(
        draft, b_draft, w.prompt_len, mean_ctx
    )
    actual = float(per_round.sum()) / rounds
    m["roofline_tok_s"] = w.batch_size * e_tok / ideal
    m["pct_roofline"] = 100.0 * ideal / actual
    m["spec_tokens_per_round"] = e_tok
    m["spec_ar"] = e_tok / (s.k + 1)
    m["spec_draft_time_share"] = float(t_dra.sum() / per_round.sum())
    m["spec_handoff_ms_per_round"] = t_hand * 1e3
    m["spec_draft_tp"] = float(dcfg.hardware.tensor_parallel)
    notes = design.notes + draft.notes + [f"acceptance from {acc_src}"]
    if not same_group:
        notes.append(
            f"draft {draft_name} runs at TP{dcfg.hardware.tensor_parallel} x "
            f"{s.draft_copies} cop{'y' if s.draft_copies == 1 else 'ies'} beside the TP{hw.tensor_parallel} "
            f"target; token hand-off {t_hand * 1e6:.1f} us per round"
        )
    res = Result("ok", metrics=m, notes=list(dict.fromkeys(notes)))  # target + draft: once each
    if keep_steps:
        res.steps = np.vstack([pre, verify])
        res.times = np.vstack([t_pre[None, :], per_round])
    return res
