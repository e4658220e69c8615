"""GPU execution: every operator is its own kernel (TensorRT-LLM issues ~10 per decoder layer).

Each kernel call pays `sync_us` (the kernel-boundary drain/synchronisation that CUDA graphs cannot
remove; a fitted law's in-graph t0 in its place), the engine's `boundary_sync_us` (a stack that pays
more at each boundary than the microbenchmarks it is costed from: conf/engine/trtllm_2024.yaml) and, without CUDA graphs, its host dispatch (`eager_dispatch_us`: the engine's
`eager_launch_us`, its framework's per-kernel dispatch, else the bare `hardware.launch_us`, times the kernels
the engine's op launches: engine.eager_kernels).
Launches are asynchronous: the host enqueues kernels ahead of the GPU, so a step's launches are
exposed only where their total exceeds the step's device time (the kernel, core/kernel.py:
max(0, sum of launches - device time)); the sync is paid at every boundary. Collectives are
separate kernels whose time adds to the step (not overlapped). Sources: Kernel Looping paper
(~320 kernel launches per token for Llama-3.1-8B, a few microseconds each);
shared/reference/hardware.md; the engines' dispatch figures in conf/engine/*.yaml.
"""

from __future__ import annotations

from typing import List, Tuple

from decodelab.components.ops import Op
from decodelab.errors import ConfigError

APPLIES = {"cuda_graphs"}


def host_round_trip(opt, cap=None):
    """Decode steps per host round trip: always 1 on a GPU (a CUDA graph replays one step and
    cannot capture MoE routing or speculation branches)."""
    notes = []
    if opt.schedule_offloading > 1:
        notes.append(
            "schedule_offloading does not apply to gpu execution (the host launches every step); ignored"
        )
    return 1, notes


def eager_dispatch_us(hw, engine=None) -> float:
    """Host microseconds to issue one kernel call outside a CUDA graph: the engine's framework
    dispatch (engine.eager_launch_us: Python module code, op dispatch and the CUDA launch API)
    where its YAML gives one, else the bare CUDA launch (hardware.launch_us). Serving's eager
    steps use the same figure (framework/modes/serving/engine_vector.py eager_fields)."""
    e = getattr(engine, "eager_launch_us", None) if engine is not None else None
    if e is None:
        return hw.launch_us
    if not e >= 0:
        raise ConfigError(f"engine.eager_launch_us={e} must be >= 0 (null: hardware.launch_us per call)")
    return float(e)


# engine.eager_kernels keys that name a role rather than an op: the head call of a routed-expert block
# and the shared expert its ops cost (Op.shared_expert)
EAGER_ROLES = ("moe_block", "shared_experts")
# Ops only some architectures build (MLA attention: components/models/mla_attn.py; MoE routing:
# components/models/experts.py): an engine file that serves every model may name them without a note
ARCH_OPS = (
    "qkv_a_proj", "q_a_norm", "q_b_proj", "kv_norm_rope_write", "q_absorb", "v_absorb", "kv_b_decompress",
    "attention_prefill", "router", "route", "shared_expert_gate",
)  # fmt: skip


def eager_table(engine=None) -> dict:
    """engine.eager_kernels checked: {key: kernels >= 1}; {} without an engine. Raises ConfigError."""
    table = dict(getattr(engine, "eager_kernels", None) or {}) if engine is not None else {}
    for key, k in table.items():
        if not isinstance(k, (int, float)) or isinstance(k, bool) or not k >= 1:
            raise ConfigError(
                f"engine.eager_kernels.{key}={k!r} must be a number >= 1 (kernels the host launches for one "
                "call of that op outside a CUDA graph)"
            )
    return {str(key): float(k) for key, k in table.items()}


def eager_kernels(op: Op, table: dict) -> float:
    """Kernels the host launches for one call of `op` outside a CUDA graph: table[op.name] (default 1);
    the head of a routed-expert block, over its MoE share of the layers, table `moe_block` plus, where the
    block's ops cost the layer's shared expert, table `shared_experts`."""
    k = table.get(op.name, 1.0)
    if op.moe_block and op.moe_block[0] == "head":
        share = float(op.moe_block[7])
        block = table.get("moe_block", k) + (table.get("shared_experts", 0.0) if op.shared_expert else 0.0)
        k = (1.0 - share) * k + share * block
    return k


def unused_eager_keys(ops: List[Op], table: dict) -> List[str]:
    """The note for engine.eager_kernels keys no op of the design has, other than the roles and the ops of
    other architectures (ARCH_OPS: the engine file serves every model): a name no op answers to."""
    names = {op.name for op in ops}
    unused = sorted(k for k in table if k not in names and k not in EAGER_ROLES and k not in ARCH_OPS)
    if not unused:
        return []
    return [f"engine.eager_kernels names {', '.join(unused)}, which no op of this model has: not used"]


def boundary_sync_us(engine=None) -> float:
    """Microseconds of synchronisation the engine's stack adds at every kernel boundary beyond its
    cost source (engine.boundary_sync_us; 0 without an engine)."""
    b = float(getattr(engine, "boundary_sync_us", 0.0) or 0.0) if engine is not None else 0.0
    if not b >= 0:
        raise ConfigError(f"engine.boundary_sync_us={b} must be >= 0")
    return b


def assign_calls(ops: List[Op], hw, opt, engine=None) -> Tuple[List[Op], List[dict], List[str]]:
    notes = []
    if opt.kernel_looping:
        notes.append("kernel_looping does not apply to gpu execution (no looped kernel calls); ignored")
    if opt.orchestration == "hardware":
        notes.append("orchestration=hardware does not apply to gpu execution; ignored")
    if opt.fusion == "layer":
        notes.append("fusion=layer does not apply to gpu execution (one kernel per operator); ignored")
    if opt.batch_streaming:
        notes.append(
            "batch_streaming does not apply to gpu execution (no looped layer kernel "
            "with a loop buffer); ignored"
        )
    # the host's dispatch of each call, pipelined against the step's kernels (core/kernel.py)
    launch = 0.0 if opt.cuda_graphs else eager_dispatch_us(hw, engine) * 1e-6
    boundary = boundary_sync_us(engine) * 1e-6
    table = eager_table(engine)
    notes += unused_eager_keys(ops, table)
    calls = []
    for i, op in enumerate(ops):
        op.call = i
        kernels = eager_kernels(op, table)
        calls.append(
            {
                "repeat": op.repeat,
                "eager_kernels": kernels,  # the host's launches of the call outside a graph
                "launch_async": launch * kernels,
                "launch_each": hw.sync_us * 1e-6 + boundary,
                "boundary_each": boundary,  # a law-costed call's t0 replaces sync_us, not this
                "fill_each": 0.0,
                "launch_once": 0.0,
                "fill_once": 0.0,
                "overlap_link": False,
                "sample_gap": 0.0,
                "free_samples": 0.0,
            }
        )
    return ops, calls, notes
