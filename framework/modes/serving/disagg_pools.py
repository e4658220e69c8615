"""The pools of a disaggregated deployment (framework/modes/serving/disagg.py) and what moves
between them, on plain arrays.

A pool is `instances` copies of one engine instance of `tensor_parallel` chips; an instance runs
its requests in `attention_dp` data-parallel attention groups (`hardware.attention_dp`, each its
own scheduler and KV pool, the FFN over every group's tokens: components/models/attn_dp.py "In
serving"), so a pool has instances x groups ranks, each one Numba scheduler
(modes/serving/scheduler.py). `pool_config` is one instance as an ordinary one-pool serving run:
the pool's chips and split, its engine settings (`max_batch`, `engine`), disaggregation off, so a
rank's design, engine vector and data-parallel token share are exactly the one-pool serving
mode's. The KV of a request crosses `kv_link` from the NIC of the prefill rank that ran it to the
NIC of the decode rank that takes it (every GPU has its own NIC; the ranks of an instance move
their shards in parallel), first come first served on each NIC.

In-engine MTP (a pool's `engine.mtp.k` > 0, modes/serving/mtp.py) is the one-pool mode's too: the
target built beside the MTP module (its layer's KV in the pool and in what crosses the link), the
draft's arrays handed to each rank's scheduler. In a prefill pool the draft runs its passes over
the prompt after the prefill (the k draft tokens the decode pool's first step verifies:
TensorRT-LLM's context servers with `speculative_config`); in a decode pool every step verifies
k + 1 positions per sequence and emits model.mtp_acceptance's expected tokens."""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from decodelab.core import parallel
from decodelab.core.build import Design, build
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.resolve import with_fields
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import mtp
from decodelab.modes.serving.engine_vector import engine_inputs
from decodelab.modes.serving.simulate import design_args, draft_args, mixed_design
from decodelab.kernel_layout import Cap
from decodelab.modes.serving.layout import Eng, Req

POOLS = ("prefill", "decode")


def check_pools(cfg, errors: List[str]) -> None:
    """Append one line per bad pool field: sizes >= 1, engine keys that name engine fields."""
    for name in POOLS:
        pool = cfg.disagg[name]
        for f in ("tensor_parallel", "instances", "attention_dp"):
            if not pool[f] >= 1:
                errors.append(f"disagg.{name}.{f}={pool[f]} must be >= 1")
        if not pool.max_batch >= 0:
            errors.append(
                f"disagg.{name}.max_batch={pool.max_batch} must be >= 0 (0: the engine's max_batch)"
            )
        for key in pool.engine or {}:
            if str(key).split(".")[0] not in cfg.engine:
                errors.append(
                    f"disagg.{name}.engine.{key} is not an engine field (core/schema_engine.py EngineConfig)"
                )


def pool_config(cfg, name: str, clients: int = 0):
    """One instance of the pool as a one-pool serving run (module docstring); a closed loop's
    instance serves `clients` of the run's clients (its attention groups' data-parallel token
    share, core/parallel.py dp_token_scale, follows from them)."""
    pool = cfg.disagg[name]
    fields = {} if pool.hardware is None else {"hardware": pool.hardware}
    fields.update(
        {
            "hardware.tensor_parallel": pool.tensor_parallel,
            "hardware.n_chips": pool.tensor_parallel,
            "hardware.attention_dp": pool.attention_dp,
            "disagg.enabled": False,
        }
    )
    if pool.moe_mapping:
        fields.update({"hardware.moe_mapping": pool.moe_mapping, "hardware.moe_ep": pool.moe_ep})
    if pool.max_batch > 0:
        fields["engine.max_batch"] = pool.max_batch
    fields.update({f"engine.{k}": v for k, v in (pool.engine or {}).items()})
    if clients > 0:
        fields["workload.concurrency"] = int(clients)
    return with_fields(cfg, fields)


def pool_design(cfg, name: str, clients: int = 0) -> Tuple[tuple, list]:
    """(the instance as (config, design, mixed-step design, MTP draft arrays or None), notes); with
    MTP the target is built beside the module (module docstring). A design that cannot be built
    raises its error with the pool named."""
    c = pool_config(cfg, name, clients)
    try:
        draft, more = None, []
        if mtp.draft_k(c) > 0:
            design, d = mtp.designs(c)
            draft = draft_args(c, d)
            more = [f"{name} pool: {design.notes[-1]}"]
        else:
            design = build(c)
        mixed, notes = mixed_design(c, design)
    except (Infeasible, ConfigError) as e:
        kind = type(e)
        split = f"tp{c.hardware.tensor_parallel}" + (
            f" adp{c.hardware.attention_dp}" if c.hardware.attention_dp > 1 else ""
        )
        raise kind(f"{name} pool ({c.hardware.name}, {split}): {e}") from None
    return (c, design, mixed, draft), notes + more


def groups(pcfg) -> int:
    """Attention groups (schedulers) of one instance of a pool (core/parallel.py serving_groups)."""
    return parallel.serving_groups(pcfg)


def run_instance(
    pcfg, design: Design, mixed: Design, draft, arrival, prompt, output, ready: bool, name: str, think=None
) -> Tuple[np.ndarray, np.ndarray]:
    """One rank: the scheduler over its requests (arrival order; NaN arrivals: issued by its
    closed-loop clients `think` s after a request ends); `draft`: the MTP draft's arrays or None."""
    try:
        eng, buckets, _ = engine_inputs(pcfg, design, prompt, output, ready)
    except Infeasible as e:
        raise Infeasible(f"{name} pool: {e}") from None
    if name == "prefill":  # its KV leaves when the step ends: TensorRT-LLM sends the context requests'
        eng[Eng.LATE_SEND] = 0.0  # cache in the iteration that ran them (PyExecutor._send_disagg_ctx_cache)
    think = np.zeros(len(prompt)) if think is None else think
    args = design_args(pcfg, design, mixed, draft)
    req, steps, status = SK.serve(*args, eng, buckets, arrival, prompt, output, think)
    if status != 0:
        raise Infeasible(f"the {name} pool's scheduler could not place every request")
    return req, steps


def run_ranks(pool, rank, arrival, prompt, output, ready: bool, name: str):
    """Every rank of a pool over the requests dealt to it (`rank[k]`: request k's rank; each rank's
    requests in arrival order): per-request rows in the requests' order, and each rank's steps.
    `pool`: (config, design, mixed design, MTP draft arrays or None) of one instance (pool_design)."""
    req = np.full((len(prompt), Req.size), np.nan)
    steps: List[np.ndarray] = []
    for r in np.unique(rank):
        idx = np.flatnonzero(rank == r)
        idx = idx[np.argsort(arrival[idx], kind="stable")]
        req[idx], s = run_instance(*pool, arrival[idx], prompt[idx], output[idx], ready, name)
        steps.append(s)
    return req, steps


def kept_tokens(prompt: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Prompt tokens whose KV the policy keeps after the prefill (scheduler.held_tokens at g = 1)."""
    n = np.minimum(prompt, caps[Cap.PROMPT_CAP]) if caps[Cap.PROMPT_CAP] > 0 else prompt.copy()
    return np.minimum(n, caps[Cap.TOTAL_CAP]) if caps[Cap.TOTAL_CAP] > 0 else n


def transfer_times(done, src, dst, rank_bytes, bw_gb_s: float, latency_us: float) -> np.ndarray:
    """When each request's KV is in its decode rank: FIFO by prefill end on the sending and
    the receiving rank's links (each chip's NIC carries its own shard: `rank_bytes`)."""
    send_free: Dict[int, float] = {}
    recv_free: Dict[int, float] = {}
    ready = np.empty(len(done))
    for k in np.argsort(done, kind="stable"):
        start = max(done[k], send_free.get(src[k], 0.0), recv_free.get(dst[k], 0.0))
        end = start + rank_bytes[k] / (bw_gb_s * 1e9)
        send_free[src[k]] = recv_free[dst[k]] = end
        ready[k] = end + latency_us * 1e-6
    return ready
