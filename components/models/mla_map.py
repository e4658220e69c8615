"""MLA attention across the sockets of a tensor-parallel group (`hardware.mla_mapping`), applied
by layers.py to the attention ops of one decoder layer. `tp` chips, a decode batch of B sequences,
a latent of kv_lora_rank + qk_rope_head_dim elements per token and layer:

- `replicated` (default): heads are split `tp` ways, the latent is not: every chip holds and
  reads the whole latent of every sequence (B x C x latent per chip per layer); the attention
  output is all-reduced like any TP layer. What a plain TP16 deployment does (SnapStream: 16-way
  TP; vLLM/SGLang without the options below).
- `context` (decode context parallelism; SGLang `--dcp-size`, vLLM
  `--decode-context-parallel-size`, docs.sglang.io "Decode Context Parallelism"): the latent's
  tokens are striped over the tp chips (token p on chip p mod tp), so every chip holds and reads
  1/tp of every sequence (B x C/tp x latent); each chip attends all H heads over its tokens (the
  same FLOPs as H/tp heads over all of them), so the queries of all heads are gathered first and
  the partial outputs with their log-sum-exp merged after: per token and chip
  (tp-1)/tp x (H (kv_lora + rope) + H (kv_lora + 1)) activations over two more collectives.
- `data` (data-parallel attention; SGLang `--enable-dp-attention`): each chip runs the whole
  attention (all H heads, attention weights replicated on every chip) for its own ceil(B/tp) of the
  B sequences and holds only their latents; the hidden states are all-gathered before the FFN and
  reduce-scattered after it (per token and chip (tp-1)/tp x d activations each) in place of the
  two all-reduces. The slowest chip sets the step: ceil(B/tp) sequences, so a batch smaller than
  tp leaves chips idle.
"""

from __future__ import annotations

import math
from typing import List

from decodelab.components.models import linear_attn
from decodelab.components.ops import PER_SEQ_FIELDS, Op

MLA_MAPPINGS = ("replicated", "context", "data")


def heads_per_chip(m, tp: int, mapping: str) -> int:
    """Query heads each chip attends with: all of them under data-parallel attention."""
    return m.n_heads if mapping == "data" else m.n_heads // tp


def seq_share(tp: int, mapping: str, batch: float) -> float:
    """Share of the batch's per-sequence attention work on the busiest chip: ceil(B/tp)/B for
    data-parallel attention, else 1 (every chip serves every sequence)."""
    if mapping != "data" or tp <= 1:
        return 1.0
    b = max(1, int(math.ceil(batch)))
    return math.ceil(b / tp) / b


def remap(att: List[Op], m, tp: int, mapping: str, batch: float, act_bytes: float) -> List[Op]:
    """The attention ops `att` (built with heads_per_chip heads) under `mapping`; returns extra
    collective ops (decode context parallelism's query gather and partial-output merge)."""
    if tp <= 1 or mapping == "replicated":
        return []
    if mapping == "data":
        f = seq_share(tp, mapping, batch)
        for op in att:
            for name in PER_SEQ_FIELDS:
                setattr(op, name, getattr(op, name) * f)
        return []
    # context: every chip holds and reads 1/tp of each sequence's latent tokens
    for op in att:
        op.kv_read_per_ctx /= tp
        op.kv_write_per_token /= tp
        op.flops_per_ctx /= tp  # prefill decompression: each chip its own tokens, all heads
        op.act_bytes_per_ctx /= tp
    H, lat, rope = m.n_heads, m.kv_lora_rank, m.qk_rope_head_dim
    share = (tp - 1) / tp
    q_gather = share * H * (lat + rope) * act_bytes
    merge = share * H * (lat + 1) * act_bytes  # partial outputs + log-sum-exp
    return [
        Op(
            "cp_attention_exchange",
            "collective",
            repeat=linear_attn.n_attending(m),  # the MLA layers (Kimi-K3: not its linear ones)
            path="decode",
            link_bytes_per_token=q_gather + merge,
            n_collectives=2,
            act_bytes_per_token=2.0 * H * (2 * lat + rope + 1) * act_bytes / tp,
        )
    ]


def collective_bytes(m, tp: int, mapping: str, act_bytes: float) -> float:
    """Link bytes per token and chip of each of a layer's two collectives around the FFN: a ring
    all-reduce 2 (tp-1)/tp d, or under data-parallel attention an all-gather (before) and a
    reduce-scatter (after) of (tp-1)/tp d each."""
    if tp <= 1:
        return 0.0
    k = 1.0 if mapping == "data" else 2.0
    return k * (tp - 1) / tp * m.d_model * act_bytes
