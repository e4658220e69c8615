"""The design's note on its per-shape operator laws (core/oplaw.py): the ops the fitted laws do not
cover (costed by the roofline law) and the MoE blocks carried from a nearby measured one
(core/moetable.py)."""

from __future__ import annotations

from typing import Optional

from decodelab.core import moetable
from decodelab.core.oplaw import gemm_dtype, laws_of, op_table, table_mismatch


def note(ops, hw, w, tp: int, engine: str = "", moe_mxfp4: str = "w4a16") -> Optional[str]:
    """One note naming the ops the fitted laws do not cover (costed by the roofline law) and the
    MoE blocks carried from a nearby measured one (core/moetable.py)."""
    if getattr(hw, "op_model", "roofline") != "fitted":
        return None
    missed, carried = [], []
    for op in ops:
        laws = laws_of(op, hw, w, tp, engine, moe_mxfp4=moe_mxfp4)
        carried.append(moetable.carried_note(op, laws.moe_from))
        if op.kind == "gemm" and laws.gemm is None and laws.moe_table is None and not laws.skip:
            why = f"no gemm.{gemm_dtype(op, w)} law" if op.gemm_n > 0 else "not a plain GEMM"
            if getattr(op, "moe_block", ()):
                why = f"no {gemm_dtype(op, w)} block in the MoE tables"
            missed.append(f"{op.name} ({why})")
        if op.kind == "attention" and laws.prefill is None and laws.decode_table is None:
            why = f"no {w.kv_dtype}_hd{int(op.attn_head_dim)} laws" if op.attn_head_dim > 0 else "not GQA/MHA"
            if op.path == "decode":  # MLA's latent attention
                why = (
                    "no op_tables.mla_decode row at its heads"
                    if op.attn_head_dim > 0
                    else "mla_mapping not replicated"
                )
            missed.append(f"{op.name} ({why})")
        if op.coll_kind and tp > 1 and laws.coll is None:
            missed.append(f"{op.name} ({op.coll_kind} has no tp{tp} law)")
    notes = []
    mismatch = table_mismatch(hw) if op_table(hw, "gemm") else []
    if mismatch:
        notes.append(
            "hardware.op_tables.gemm was measured on another chip ("
            + ", ".join(mismatch)
            + "): its GEMM times are scaled by the op_fit.gemm laws' ratio of this chip to that one"
            + (
                "; its decode attention tables are not used (op_fit.attention_decode)"
                if op_table(hw, "attention_decode")
                else ""
            )
        )
    notes += [c for c in carried if c]
    if missed:
        notes.append("op_model=fitted: roofline law for " + ", ".join(dict.fromkeys(missed)))
    return "; ".join(notes) or None
