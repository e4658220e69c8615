"""Multi-head latent attention decoder (`arch: mla`; DeepSeek-V2/V3/R1): the KV cache is one
latent of kv_lora_rank + one RoPE key of qk_rope_head_dim per token and layer, shared by all
heads; decode runs the absorbed-weight path (attention in the latent space). The FFN is dense or
mixture-of-experts (n_experts > 0, first_dense_layers dense), as in moe.py.

  KV bytes per token = n_layers * (kv_lora_rank + qk_rope_head_dim) * bytes
  (DeepSeek-V3/R1, BF16: 61 * 576 * 2 = 70,272 B; models.md)
Formulas: components/models/layers.py; docs/kv_policies.md, "Architectures".
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
