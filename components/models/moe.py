"""Mixture-of-experts decoder (`arch: moe`): GQA/MHA attention (or MLA when kv_lora_rank > 0),
top-k routed experts + always-on shared experts, optional dense first layers. Expert weights
read per step = the expected number of distinct experts the step's tokens activate,
E (1 - (1 - k/E)^tokens) (components/models/experts.py, docs/model.md, "MoE decode step").
Models: Mixtral-8x7B.
"""

from __future__ import annotations

from decodelab.components.models.layers import (
    build_ops,
    expected_experts,
    kv_bytes_per_token,
    kv_layer_mix,
    param_counts,
    streamed_params,
)

# the architecture interface (components/models/__init__.py), shared with the other layer kinds
__all__ = [
    "build_ops",
    "expected_experts",
    "kv_bytes_per_token",
    "kv_layer_mix",
    "param_counts",
    "streamed_params",
]
