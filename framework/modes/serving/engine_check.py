"""Checks of an engine config (`engine.*`, framework/core/schema_engine.py) before a serving run:
one ConfigError listing every bad field with its allowed values."""

from __future__ import annotations

from decodelab.errors import ConfigError
from decodelab.modes.serving.layout import ORDERS

ON_KV_FULL = ("queue", "preempt")
SWA_KV = ("window", "full", "ratio")
GRAPH_OVERFLOW = ("eager", "cap")


def check_engine(e) -> None:
    errors = []
    for name in ("max_batch", "max_tokens_per_step", "kv_block_tokens"):
        if getattr(e, name) < 1:
            errors.append(f"engine.{name}={getattr(e, name)} must be >= 1")
    if e.chunk_size < 0:
        errors.append(f"engine.chunk_size={e.chunk_size} must be >= 0 (0: whole prompts)")
    if e.order not in ORDERS:
        errors.append(f"engine.order={e.order!r} is not one of: {', '.join(ORDERS)}")
    if e.on_kv_full not in ON_KV_FULL:
        errors.append(f"engine.on_kv_full={e.on_kv_full!r} is not one of: {', '.join(ON_KV_FULL)}")
    elif e.on_kv_full == "preempt" and e.chunk_size == 0:
        errors.append(
            "engine.on_kv_full=preempt needs chunked prefill (engine.chunk_size > 0): a "
            "preempted request recomputes prompt + output, which can exceed the budget"
        )
    errors += host_errors(e)
    errors += admission_errors(e)
    if e.swa_kv not in SWA_KV:
        errors.append(f"engine.swa_kv={e.swa_kv!r} is not one of: {', '.join(SWA_KV)}")
    if not 0.0 <= e.swa_full_tokens_ratio <= 1.0:
        errors.append(f"engine.swa_full_tokens_ratio={e.swa_full_tokens_ratio} must be in [0, 1]")
    if e.graph_overflow not in GRAPH_OVERFLOW:
        errors.append(
            f"engine.graph_overflow={e.graph_overflow!r} is not one of: {', '.join(GRAPH_OVERFLOW)}"
        )
    dpa = e.dp_attention
    for name in ("reserve_gib", "reserve_gib_per_group", "balance_timeout_iters", "balance_wait_iters"):
        if not getattr(dpa, name) >= 0:
            errors.append(f"engine.dp_attention.{name}={getattr(dpa, name)} must be >= 0")
    if not 0.0 <= dpa.admit_scale <= 1.0 / max(e.admit_ratio, 1e-9):
        errors.append(
            f"engine.dp_attention.admit_scale={dpa.admit_scale} must be >= 0 and keep "
            f"admit_scale x engine.admit_ratio <= 1"
        )
    if any(b < 1 for b in e.batch_buckets):
        errors.append(f"engine.batch_buckets={list(e.batch_buckets)} must all be >= 1")
    if errors:
        raise ConfigError("\n".join(errors))


def host_errors(e) -> list:
    """The bad host-side fields: the scheduler loop, eager dispatch and the front end."""
    errors = []
    if e.host_iter_us is not None and not e.host_iter_us >= 0:
        errors.append(f"engine.host_iter_us={e.host_iter_us} must be >= 0 (null: hardware.host_step_us)")
    if not e.host_per_req_us >= 0:
        errors.append(f"engine.host_per_req_us={e.host_per_req_us} must be >= 0")
    for name in ("request_ms", "tokenize_mb_s"):
        if not getattr(e.frontend, name) >= 0:
            errors.append(
                f"engine.frontend.{name}={getattr(e.frontend, name)} must be >= 0 (0: not modelled)"
            )
    if e.eager_launch_us is not None and not e.eager_launch_us >= 0:
        errors.append(
            f"engine.eager_launch_us={e.eager_launch_us} must be >= 0 (null: hardware.launch_us per call)"
        )
    return errors


def admission_errors(e) -> list:
    """The bad fields of when requests enter steps: the admission reserve, the polling interval and
    batch waiting."""
    errors = []
    if not 0.0 <= e.admit_ratio <= 1.0:
        errors.append(f"engine.admit_ratio={e.admit_ratio} must be in [0, 1] (0: no admission reserve)")
    elif e.admit_ratio > 0.0 and e.on_kv_full != "preempt":
        errors.append(
            f"engine.admit_ratio={e.admit_ratio} needs engine.on_kv_full=preempt (queue reserves "
            "each request's whole KV already)"
        )
    if not 0.0 <= e.admit_ratio_min <= max(e.admit_ratio, 0.0):
        errors.append(f"engine.admit_ratio_min={e.admit_ratio_min} must be in [0, engine.admit_ratio]")
    for name in ("admit_ratio_decay_steps", "admit_clip_tokens", "recv_interval"):
        if getattr(e, name) < 1:
            errors.append(f"engine.{name}={getattr(e, name)} must be >= 1")
    if e.admit_retract_steps < 0:
        errors.append(f"engine.admit_retract_steps={e.admit_retract_steps} must be >= 0")
    if e.batch_wait_timeout_iters < 0:
        errors.append(f"engine.batch_wait_timeout_iters={e.batch_wait_timeout_iters} must be >= 0 (0: off)")
    if not 0.0 <= e.batch_wait_max_tokens_ratio <= 1.0:
        errors.append(
            f"engine.batch_wait_max_tokens_ratio={e.batch_wait_max_tokens_ratio} must be in [0, 1] (0: off)"
        )
    return errors
