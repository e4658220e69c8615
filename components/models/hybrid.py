"""Hybrid decoder (`arch: hybrid`): per-layer kinds from `layer_pattern`, repeated to n_layers:
`full` attention, `sliding` window attention (keeps and reads the last `sliding_window` tokens:
constant state per sequence), `state` (linear-attention / state-space layers with a constant
`state_bytes_per_layer` per sequence), `linear` (Gated DeltaNet or Mamba-2 mixers with ops of their
own: linear_attn.py) and `none` (no mixer: Llama-Nemotron's no-op attention). FFN dense or MoE
(n_experts > 0), absent in model.ffn_free_layers layers. Models: GPT-OSS-120B (alternating
sliding-window 128 and full attention, 128 experts top-4), Qwen3.5, Nemotron-H, Nemotron 3.

The kernel attends one context per row for every layer, so decode rows carry the layer-averaged
tokens (framework/core/kv_costs.py): full layers read what the KV policy keeps, sliding layers
min(that, window), state layers their state in token-equivalents; memory likewise. Prefill rows
attend the whole prompt in every layer (sliding layers' prefill is overstated).
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
