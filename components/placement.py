"""Memory placement: weights, then the KV cache, into the hardware's tiers, HBM first and DDR
next where the chip has it (SRAM is working memory, not a placement target). A design that does
not fit raises Infeasible with needed vs available bytes per tier.

The KV cache's placement is a stated policy, never a silent spill (`workload.kv_placement`):
- `hbm` (default): KV lives in HBM only; a cache that does not fit next to the weights is
  infeasible, with the bytes needed and free;
- `spill_ddr`: what does not fit in HBM goes to the DDR tier (chips that have one) and every
  step reads that share at DDR bandwidth (the kernel's per-tier KV fractions); the result says
  how much spilled (a note and the `kv_ddr_pct` metric).
`reserved` holds bytes per tier another model already uses on the same chips (a speculative
draft beside its target), so one rule covers a target alone and a target with its draft."""

from __future__ import annotations

from typing import Dict, List, Optional

from decodelab.errors import Infeasible

GIB = float(2**30)
PLACEMENT_ORDER = ("hbm", "ddr")
KV_PLACEMENTS = ("hbm", "spill_ddr")


def place(
    tiers: List,
    weight_bytes: float,
    kv_bytes: float,
    kv_placement: str = "hbm",
    reserved: Optional[Dict[str, float]] = None,
) -> Dict:
    """Greedy placement per chip. Returns fractions of weights and KV per tier (in `tiers`
    order), bytes used per tier name (this model's own) and notes on anything outside HBM."""
    cap = {t.name: t.capacity_gib * GIB for t in tiers}
    free = {n: c - (reserved or {}).get(n, 0.0) for n, c in cap.items()}
    names = [t.name for t in tiers]
    w_frac = [0.0] * len(tiers)
    kv_frac = [0.0] * len(tiers)
    used = {n: 0.0 for n in names}
    notes = []
    kv_tiers = ("hbm",) if kv_placement == "hbm" else PLACEMENT_ORDER
    for what, amount, frac, order in (
        ("weights", weight_bytes, w_frac, PLACEMENT_ORDER),
        ("KV", kv_bytes, kv_frac, kv_tiers),
    ):
        left = amount
        for tier in order:
            if tier not in free or left <= 0:
                continue
            take = max(0.0, min(left, free[tier]))
            free[tier] -= take
            used[tier] += take
            frac[names.index(tier)] = take / amount if amount > 0 else 0.0
            left -= take
            if tier != "hbm" and take > 0:
                notes.append(
                    f"{what}: {take / GIB:.1f} GiB per chip placed in {tier} "
                    f"({100 * take / amount:.0f}%), read at {tier} bandwidth"
                )
        if left > 1e-6 * max(amount, 1.0):
            taken = "".join(
                f" + {(reserved or {}).get(n, 0.0) / GIB:.1f} GiB of the other model"
                for n in ("hbm",)
                if (reserved or {}).get(n, 0.0) > 0
            )
            where = " + ".join(n for n in (order if what == "KV" else PLACEMENT_ORDER) if n in cap)
            raise Infeasible(
                f"does not fit memory: needs {weight_bytes / GIB:.1f} GiB weights + "
                f"{kv_bytes / GIB:.1f} GiB KV per chip{taken}, available "
                + ", ".join(f"{n} {cap[n] / GIB:.1f} GiB" for n in PLACEMENT_ORDER if n in cap)
                + f"; {what} may use {where}"
                + (
                    " (workload.kv_placement=spill_ddr lets KV spill to DDR)"
                    if what == "KV" and kv_placement == "hbm" and "ddr" in cap
                    else ""
                )
            )
    if kv_bytes <= 0:
        kv_frac[names.index("hbm")] = 1.0
    return {"weight_frac": w_frac, "kv_frac": kv_frac, "used": used, "capacity": cap, "notes": notes}
