"""Data-parallel attention for GQA/MHA models (`hardware.attention_dp` = dp; SGLang
`--enable-dp-attention --dp-size`, vLLM data parallelism with expert parallelism; docs/model.md,
"Parallelism beyond tensor parallelism"), applied by dense.py and layers.py. The tp chips form dp attention groups of
tp_a = tp / dp chips: each group runs the attention block (QKV projection, RoPE + KV write,
attention, output projection) for its own ceil(B/dp) of the step's B sequences, tensor-parallel
over its tp_a chips (heads and KV heads split tp_a ways: the block's weights are held dp times),
and holds only those sequences' KV. The FFN (dense or MoE) stays sharded over all tp chips:

- before the FFN: the group's partial attention outputs are all-reduced inside the group
  (ring, 2 (tp_a - 1)/tp_a x d per group token; none when tp_a = 1) and every chip gathers the
  other groups' hidden states (all-gather, (dp - 1)/dp x d per step token);
- after the FFN: the partial FFN outputs are reduce-scattered over the tp chips to the groups
  ((tp - 1)/tp x d per step token) and all-gathered inside the group ((tp_a - 1)/tp_a x d per
  group token).

The slowest group sets the step: ceil(B/dp) sequences, so a batch smaller than dp leaves groups
idle. dp = 1 is plain tensor parallelism (these functions are not called). MLA models take
`hardware.mla_mapping=data` (mla_map.py: dp = tp); with dp = tp the bytes here equal its
all-gather and reduce-scatter.

In serving (`group_tokens`: layers.py, dense.py) each group runs its own scheduler over its own
requests (TensorRT-LLM's attention DP: one executor per rank; SGLang's DP attention: one
scheduler per DP rank; vLLM: one engine core per DP rank), and the groups meet in every layer's
FFN. The simulation runs one group (framework/modes/serving: its share of the clients, its KV
pool) with the groups balanced: the attention block costs that group's own tokens, the FFN and
the collectives around it (`Op.replica`) every group's, i.e. its tokens times the groups' share
(core/parallel.py dp_token_scale), with the collective bytes of an even split (1/dp of the
replica's tokens per group).
"""

from __future__ import annotations

import math
from typing import List

from decodelab.components.ops import PER_SEQ_FIELDS, Op

ATTENTION_OPS = ("qkv_proj", "qk_norm", "rope", "rope_kv_write", "attention", "o_proj")


def share(dp: int, batch: float) -> float:
    """Share of the step's sequences in the busiest attention group: ceil(B/dp) / B."""
    if dp <= 1:
        return 1.0
    b = max(1, int(math.ceil(batch)))
    return math.ceil(b / dp) / b


def remap(ops: List[Op], dp: int, batch: float) -> None:
    """Scale the per-sequence terms of the attention block (built for tp / dp chips) to the
    busiest group's sequences."""
    f = share(dp, batch)
    for op in ops:
        if op.name in ATTENTION_OPS:
            for name in PER_SEQ_FIELDS:
                setattr(op, name, getattr(op, name) * f)


def mark_replica(ops: List[Op]) -> None:
    """Serving: `ops` (the FFN and the collectives around it) run on every group's tokens; the
    attention block keeps its group's own (module docstring, "In serving")."""
    for op in ops:
        op.replica = True


def collectives(m, tp: int, dp: int, batch: float, act_bytes: float):
    """(before, after, n_before, n_after): link bytes per step token and chip of the collectives
    before and after the FFN, and their counts (module docstring)."""
    tp_a, f, d = tp // dp, share(dp, batch), m.d_model * act_bytes
    group = (tp_a - 1) / tp_a if tp_a > 1 else 0.0
    before = f * 2.0 * group * d + (dp - 1) / dp * d
    after = (tp - 1) / tp * d + f * group * d
    n_group = 1 if tp_a > 1 else 0
    return before, after, 1 + n_group, 1 + n_group


def ring_allreduce_op(name: str, tp: int, msg_bytes: float, repeat: int) -> Op:
    """A tensor-parallel ring all-reduce of `msg_bytes` per token on `tp` chips, `repeat` times a step:
    each chip sends 2 (tp-1)/tp of the message, reads it and writes the sum."""
    return Op(
        name,
        "collective",
        repeat=repeat,
        link_bytes_per_token=2.0 * (tp - 1) / tp * msg_bytes,
        n_collectives=1,
        act_bytes_per_token=2.0 * msg_bytes,
        coll_kind="all_reduce",
        coll_bytes_per_token=msg_bytes,
    )


def collective_op(name: str, m, tp: int, dp: int, batch: float, act_bytes: float, side: int) -> Op:
    """The collective before (side 0) or after (side 1) the FFN of a GQA/MHA decoder layer: the
    ring all-reduce of tensor parallelism (2 (tp-1)/tp x d per token), or under dp > 1 the
    collectives above (no fitted law covers them: the link roofline, opcost/registry.py)."""
    d = m.d_model
    if dp <= 1:
        return ring_allreduce_op(name, tp, d * act_bytes, m.n_layers)
    c = collectives(m, tp, dp, batch, act_bytes)
    link, n, kind = c[side], c[2 + side], "data_parallel_attention"
    return Op(
        name,
        "collective",
        repeat=m.n_layers,
        link_bytes_per_token=link,
        n_collectives=n,
        act_bytes_per_token=2.0 * d * act_bytes,
        coll_kind=kind,
        coll_bytes_per_token=d * act_bytes,
    )
