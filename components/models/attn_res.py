"""Block Attention Residuals (model.attn_res_block_size B; Kimi-K3, B = 12): each sublayer's input is a
softmax mix over depth in place of the residual sum (Kimi's "Attention Residuals", arXiv 2603.15031; Moonshot's
modeling_kimi_linear.py `_apply_attn_res`, vLLM vllm/models/kimi_k3/nvidia/ops/attn_res.py, TensorRT-LLM
`trtllm::attn_res_fwd`). The sources are the block snapshots (the embedding, then one per B layers) and the
running sum of the current block, each weighted by its RMS-normalised dot product with a learned vector of d.

Layer i (0-based) mixes ceil(i / B) snapshots + the running sum before its attention and again before its FFN;
one mix over all ceil(L / B) snapshots + the sum precedes the final norm: 2 L + 1 mixes a step, each its own
kernel (TensorRT-LLM's attn_res_fwd, vLLM's Triton / SM100 op). A mix reads its sources (d elements each) and
writes d, ~7 FLOPs per source element (norm, dot product, weighted sum). Nothing is kept across steps: the
snapshots live within one forward (vLLM allocates them in `forward`), so no cache or state grows; under
pipeline parallelism they would travel between stages (not modelled). The snapshot writes, one per block, are
not counted. Parameters: two norm weights and two projections of d per layer, two of d for the final mix.
"""

from __future__ import annotations

import math
from typing import List

from decodelab.components.ops import Op


def n_blocks(m) -> int:
    """Attention-residual blocks of the model (0: ordinary residual adds)."""
    b = getattr(m, "attn_res_block_size", 0)
    return math.ceil(m.n_layers / b) if b > 0 else 0


def mean_sources(m) -> float:
    """Sources a mix reads, averaged over a step's 2 L + 1 mixes (module docstring)."""
    b, n = m.attn_res_block_size, m.n_layers
    per_layer = sum(math.ceil(i / b) + 1 for i in range(n))
    return (2 * per_layer + n_blocks(m) + 1) / (2 * n + 1)


def params(m) -> int:
    """The mixes' parameters (module docstring): none without blocks."""
    return (4 * m.n_layers + 2) * m.d_model if n_blocks(m) else 0


def attn_res_ops(m, act_bytes: float) -> List[Op]:
    """The mixes of one step on one chip (the hidden state is whole on every chip): none without blocks."""
    if not n_blocks(m):
        return []
    d, src = m.d_model, mean_sources(m)
    return [
        Op(
            "attn_res_mix",
            "elementwise",
            repeat=2 * m.n_layers + 1,
            weight_bytes=2.0 * d * 2.0,  # its norm weight and vector, BF16
            flops_per_token=7.0 * src * d,
            act_bytes_per_token=(src + 1.0) * d * act_bytes,
        )
    ]
