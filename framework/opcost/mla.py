"""The MLA family (hardware.op_model=fitted; docs/model.md, "Per-shape operator laws"; history:
docs/journal/2026-11-27-mla-decode-tables.md): MLA's absorbed-path attention over the latent (the
decode-path attention op of components/models/mla.py: one KV head of kv_lora_rank + qk_rope_head_dim,
read once for keys and values) is costed from a table of MLA decode attention microbenchmarks alone
(`hardware.op_tables.mla_decode`, `mla_decode_by_engine.<family>`), read and interpolated as the GQA
decode attention tables are (opcost.attention_decode); no law stands in where no table holds its
heads per chip (the roofline law)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from decodelab.opcost import attention_decode
from decodelab.opcost.base import Ctx, Price, Step, check_tables


NAME = "mla"
FIT_GROUPS = ()


def matches(op) -> bool:
    return op.attn_head_dim > 0 and not op.in_attention_call and op.path == "decode"


def price(op, ctx: Ctx) -> Optional[Price]:
    table = attention_decode.decode_table(op, ctx, np.inf, "mla_decode")
    return None if table is None else attention_decode.table_price(NAME, {}, table)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    if step.dec_tokens < 0.5:
        return 0.0, 0.0, 0.0
    return attention_decode.table_reference(p, step)


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if op.kind != "attention" or op.path != "decode" or NAME in priced:
        return None
    return (
        "no op_tables.mla_decode row at its heads" if op.attn_head_dim > 0 else "mla_mapping not replicated"
    )


def check(hw) -> List[str]:
    return check_tables(hw, "mla_decode", attention_decode.problem)
