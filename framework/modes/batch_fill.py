"""workload.batch_fill: the largest batch whose KV fits in HBM next to the weights (with
speculative decoding, the draft's weights and KV too)."""

from __future__ import annotations


from decodelab.core import kv_costs
from decodelab.core.build import build
from decodelab.errors import Infeasible
from decodelab.modes.resolve import with_fields
from decodelab.modes.speculative import draft_cfg


def resolve_batch(cfg):
    """With workload.batch_fill, a copy of cfg whose batch_size is the largest batch that fits
    (Design.max_batch; with speculative decoding, target + draft weights and KV slots);
    Infeasible when not even one sequence fits."""
    if not getattr(cfg.workload, "batch_fill", False):
        return cfg
    probe = with_fields(cfg, {"workload.batch_size": 1, "workload.batch_fill": False})
    try:
        d = build(probe)
        b = d.max_batch
        if probe.speculative.enabled:  # the draft's weights and KV share the chips' HBM
            dr = build(draft_cfg(probe))
            cap = cfg.hardware.memory["hbm"].capacity_gib * kv_costs.GIB
            b = kv_costs.max_batch(
                cap, d.weights_chip + dr.weights_chip, d.kv_slot_bytes_chip + dr.kv_slot_bytes_chip
            )
    except Infeasible:
        b = 0
    if b < 1:
        raise Infeasible(
            f"batch_fill: not one sequence's KV slot fits in HBM next to the weights "
            f"of {cfg.model.name} on {cfg.hardware.name}"
        )
    return with_fields(probe, {"workload.batch_size": b})
