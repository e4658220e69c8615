"""The memory a serving engine keeps out of its KV pool for the activations of its start-up
profile (`engine.profile_reserve`; kv_pool.kv_pool_bytes, docs/model.md, "Serving: continuous
batching").

vLLM and TensorRT-LLM size the pool after one profiling forward pass and take its peak PyTorch
allocation out of it:
  - vLLM V1 (`Worker.determine_available_memory`, v1/worker/gpu_worker.py in the 0.12.0 wheel):
    pool = gpu_memory_utilization x HBM - weights - peak activations - non-torch memory, the peak
    taken over `profile_run` = a forward of max_num_batched_tokens dummy tokens, then
    `_dummy_sampler_run`: logits of min(tokens, max_num_seqs) rows sampled with top-k and top-p
    (v1/worker/gpu_model_runner.py);
  - TensorRT-LLM's PyTorch flow (`KvCacheCreator`, _torch/pyexecutor/_util.py): dummy context
    requests of max_num_tokens tokens in all; pool = free_gpu_memory_fraction x (HBM - peak
    PyTorch allocation - memory outside PyTorch), the peak holding the weights and the activations.

The peak of the forward is the residual stream of `tokens` tokens plus the largest working set
of one layer operator (its activations read and written: `act_bytes_per_token` of the layer ops,
e.g. SwiGLU's gate/up output and its product). The sampler's is `profile_sampler_bytes` per
vocabulary entry of each sampled row, with the forward's hidden states still held. Memory
outside PyTorch (CUDA context, NCCL and graph buffers) is not modelled
(docs/journal/2026-11-23-continuous-batching-and-kv-pool.md)."""

from __future__ import annotations

from typing import Iterable

from decodelab.core.kv_costs import state_pool_kind


def forward_peak_bytes(ops: Iterable, tokens: int, d_model: int, act_bytes: float) -> float:
    """Activations alive at the peak of a forward pass over `tokens` tokens on one chip: the
    residual stream plus the largest per-token working set of a decoder-layer operator that runs in
    it (the profile is a prefill: a decode-only op, whose bytes per token carry a recurrent state's
    read and write, is not part of it)."""
    work = max((o.act_bytes_per_token for o in ops if o.stage == "layer" and o.path != "decode"), default=0.0)
    return tokens * (work + d_model * act_bytes)


def sampler_peak_bytes(rows: int, vocab: int, bytes_per_entry: float) -> float:
    """Bytes the sampler holds at its peak over `rows` rows of `vocab` logits."""
    return rows * vocab * bytes_per_entry


def holds_profile(e) -> bool:
    """Whether the engine keeps its start-up profile's activations out of the KV pool (reserve_bytes)."""
    return bool(e.profile_reserve) and e.kv_mem_basis != "reserve"


def reserve_bytes(cfg, ops, act_bytes: float, samples: bool = True) -> float:
    """Per-chip bytes the engine keeps out of its KV pool for its profile's activations (0 when
    `engine.profile_reserve` is off, and under kv_mem_basis reserve, whose reserve already stands
    for the activations: kv_pool.kv_pool_bytes). `samples`: the chip runs the profile's sampler (under
    pipeline parallelism only the last stage does: vLLM's profile_run samples on the last rank)."""
    e, m = cfg.engine, cfg.model
    if not holds_profile(e):
        return 0.0
    tokens = int(e.max_tokens_per_step)
    forward = forward_peak_bytes(ops, tokens, m.d_model, act_bytes)
    per_entry = float(e.profile_sampler_bytes)
    if not (samples and per_entry > 0.0):
        return forward
    rows = min(tokens, int(e.max_batch))
    sampled = tokens * m.d_model * act_bytes + sampler_peak_bytes(rows, m.vocab_size, per_entry)
    return max(forward, sampled)


def pool_engine_values(cfg, state_bytes_per_seq: float) -> tuple:
    """The engine values a design's KV pool was sized with beyond its composed files: the start-up
    profile's step budget and sequences (reserve_bytes) and the per-sequence state pool's sequences
    (kv_costs.less_state_pool). Two configs that differ only elsewhere share one pool; a caller
    that sets per-run engine values (validate's rows) rebuilds a design whose values differ."""
    e = cfg.engine
    profile = holds_profile(e)
    states = state_pool_kind(state_bytes_per_seq, e) == "max_batch"
    return (
        int(e.max_tokens_per_step) if profile else None,
        int(e.max_batch) if (profile and e.profile_sampler_bytes > 0) or states else None,
    )
