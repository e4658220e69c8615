"""Memory placement: weights, then the KV cache, into the hardware's tiers, HBM first and DDR
next where the chip has it (SRAM is working memory, not a placement target). A design that does
not fit raises Infeasible with needed vs available bytes per tier."""

from __future__ import annotations

from typing import Dict, List

from decodelab.errors import Infeasible

GIB = float(2**30)
PLACEMENT_ORDER = ("hbm", "ddr")


def place(tiers: List, weight_bytes: float, kv_bytes: float) -> Dict:
    """Greedy placement per chip. Returns fractions of weights and KV per tier (in `tiers`
    order) and bytes used per tier name."""
    cap = {t.name: t.capacity_gib * GIB for t in tiers}
    free = dict(cap)
    names = [t.name for t in tiers]
    w_frac = [0.0] * len(tiers)
    kv_frac = [0.0] * len(tiers)
    used = {n: 0.0 for n in names}
    for what, amount, frac in (("weights", weight_bytes, w_frac), ("kv", kv_bytes, kv_frac)):
        left = amount
        for tier in PLACEMENT_ORDER:
            if tier not in free or left <= 0:
                continue
            take = min(left, free[tier])
            free[tier] -= take
            used[tier] += take
            frac[names.index(tier)] = take / amount if amount > 0 else 0.0
            left -= take
        if left > 1e-6 * max(amount, 1.0):
            avail = ", ".join(f"{n} {cap[n] / GIB:.1f} GiB" for n in PLACEMENT_ORDER if n in cap)
            raise Infeasible(
                f"does not fit memory: needs {weight_bytes / GIB:.1f} GiB weights + "
                f"{kv_bytes / GIB:.1f} GiB KV per chip, available {avail}"
            )
    if kv_bytes <= 0:
        kv_frac[names.index("hbm")] = 1.0
    return {"weight_frac": w_frac, "kv_frac": kv_frac, "used": used, "capacity": cap}
