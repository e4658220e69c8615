"""The engine vector a serving run's scheduler kernel takes (layout.py Eng, every field by name):
the step limits and admission reserve, the KV pool's paging and sliding-window layers, the engine's
eager dispatch and batch waiting; and the requests it could never schedule (Infeasible). Built
once per run from the config and the design at the edge (simulate.py prepare)."""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np

from decodelab.components.models import linear_attn
from decodelab.components.placement import GIB
from decodelab.core import parallel
from decodelab.core.build import Design
from decodelab.core.kv_costs import ReadModel, state_pool_kind
from decodelab.errors import Infeasible
from decodelab.kernel_layout import Cap, Hw
from decodelab.modes.serving import mtp, scheduler as SK
from decodelab.modes.serving.engine_check import check_engine
from decodelab.modes.serving.layout import Eng, ORDERS
from decodelab.modes.serving.metrics import kv_bytes_per_token_chip


def eager_steps(cfg) -> Tuple[bool, bool]:
    """(steps with prefill work, decode-only steps): which of a GPU design's steps replay no CUDA
    graph, so that the engine's host dispatches every kernel of them (engine.eager_launch_us)."""
    if cfg.hardware.execution != "gpu":
        return False, False
    graphs = bool(cfg.optimizations.cuda_graphs)
    return (not graphs) or bool(cfg.engine.graphs_decode_only), not graphs


def max_held(prompt: np.ndarray, output: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """scheduler.max_held_tokens over arrays of requests (numpy, one call)."""
    kept = np.minimum(prompt, caps[Cap.PROMPT_CAP]) if caps[Cap.PROMPT_CAP] > 0 else prompt
    n = kept + output - 1.0
    if caps[Cap.TOTAL_CAP] > 0:
        n = np.minimum(n, caps[Cap.TOTAL_CAP])
    return np.maximum(prompt, n)


def sliding_fields(design: Design, e) -> Dict[str, float]:
    """The sliding-window layers' share, window and pool rule (engine.swa_kv) of the engine vector
    (layout.py Eng.SLIDE, WINDOW, SLIDE_MEM; all 0: every layer a full-attention one); state layers
    stay costed as full-attention ones. Sparse attention (components/models/dsa.py, csa.py, msa.py) has fields of
    its own (Eng.SPARSE, TOPK): its share read for the top-k, held whole."""
    rm = getattr(design, "kv_read_model", None)
    sparse = {"sparse": 0.0, "topk": 0.0}
    if rm is not None and rm[ReadModel.SPARSE] > 0:
        sparse = {"sparse": rm[ReadModel.SPARSE], "topk": rm[ReadModel.TOPK]}
    if rm is None or rm[ReadModel.SLIDE] <= 0 or rm[ReadModel.WINDOW] <= 0:
        return {"slide": 0.0, "window": 0.0, "slide_mem": 0.0, **sparse}
    mem = {"window": -1.0, "full": 1.0}.get(e.swa_kv, e.swa_full_tokens_ratio)
    return {"slide": rm[ReadModel.SLIDE], "window": rm[ReadModel.WINDOW], "slide_mem": mem, **sparse}


def kv_paging(cfg, design: Design, per_tok: float) -> Dict[str, float]:
    """The pool's block (Eng.BLOCK, tokens) and a held sequence's linear-layer states in pool token-equivalents
    (Eng.STATE_TOKENS). Under engine.state_in_kv_pool, vLLM's hybrid KV cache manager
    (platforms/interface.py _align_hybrid_block_size, without prefix caching): one page per layer and block,
    its attention block grown to a multiple of kv_block_tokens a holds a linear layer's state,
    B = a ceil(state page / (a x a layer's KV per token)); layers grouped g = min(attending, linear) a
    group, a request holds ceil(linear / g) state blocks of g pages beside its attention blocks; states
    without linear layers (DeepSeek-V4's compressor states) take their bytes in the pool. Else the engine
    file's block and no states in the pool."""
    e = cfg.engine
    state = float(design.memory.get("state_bytes_per_seq", 0.0))
    n_lin, n_att = linear_attn.n_linear(cfg.model), linear_attn.n_attending(cfg.model)
    if not e.state_in_kv_pool or state <= 0.0 or n_att == 0 or per_tok <= 0.0:
        return {"block": float(e.kv_block_tokens), "state_tokens": 0.0}
    if n_lin == 0:  # states beside attention layers (DeepSeek-V4's compressors): pages of their own
        return {"block": float(e.kv_block_tokens), "state_tokens": state / per_tok}
    a, page, kv_layer = e.kv_block_tokens, state / n_lin, per_tok / n_att
    block = a * math.ceil(page / (a * kv_layer))
    g = min(n_att, n_lin)
    return {"block": float(block), "state_tokens": math.ceil(n_lin / g) * block * g / n_att}


def eager_fields(cfg, design: Design) -> Dict[str, float]:
    """The engine's dispatch of an eager step (engine.eager_launch_us; Eng.EAGER_HOST, EAGER_DECODE):
    the host time of a step with prefill work when it replays no graph (the kernels it launches: each
    call's repeats, per-layer calls x layers, x the kernels the engine's op launches, engine.eager_kernels
    as components/execution/gpu.py put them in the call), and whether decode-only steps are eager too."""
    e = cfg.engine
    if e.eager_launch_us is None:
        return {"eager_host": 0.0, "eager_decode": 0.0}
    mixed_eager, decode_eager = eager_steps(cfg)
    kernels = np.array([c.get("eager_kernels", 1.0) for c in design.calls], dtype=np.float64)
    host = e.eager_launch_us * 1e-6 * float(np.sum(design.call_rep * kernels)) if mixed_eager else 0.0
    return {"eager_host": host, "eager_decode": 1.0 if decode_eager else 0.0}


def admission_fields(e, admit: float) -> Dict[str, float]:
    """The admission reserve's fields of the engine vector (engine.admit_*, x `admit`: the share
    under data-parallel attention, engine.dp_attention.admit_scale)."""
    return {
        "admit_ratio": admit * e.admit_ratio,
        "admit_min": admit * e.admit_ratio_min,
        "admit_decay": admit * (e.admit_ratio - e.admit_ratio_min) / e.admit_ratio_decay_steps,
        "admit_clip": e.admit_clip_tokens,
        "admit_retract": e.admit_retract_steps,
    }


def step_limits(cfg) -> Tuple[Dict[str, float], np.ndarray, list]:
    """The engine vector's step limits and admission reserve (Eng.MAX_BATCH, MAX_TOKENS, CHUNK,
    GRAPH_MAX, ADMIT_*), the batch bucket list and notes. Under data-parallel attention they are
    one attention group's own scheduler's (engine.dp_attention)."""
    e = cfg.engine
    notes = []
    budget, chunk, admit = e.max_tokens_per_step, e.chunk_size, 1.0
    groups = parallel.serving_groups(cfg)
    if groups > 1:
        admit = e.dp_attention.admit_scale
        if e.dp_attention.split_budget:
            budget, chunk = max(1, budget // groups), (max(1, chunk // groups) if chunk else 0)
            notes.append(
                f"data-parallel attention: each group's step budget {budget} and prefill chunk "
                f"{chunk} tokens (engine.dp_attention.split_budget: the file's // {groups})"
            )
    buckets = np.array(sorted(set(int(b) for b in e.batch_buckets)), dtype=np.float64)
    max_batch = e.max_batch
    if len(buckets) and max_batch > buckets[-1] and e.graph_overflow == "cap":
        max_batch = int(buckets[-1])
        notes.append(f"engine.max_batch capped at the largest batch bucket ({max_batch})")
    limits = {
        "max_batch": max_batch,
        "max_tokens": budget,
        "chunk": chunk,
        "graph_max": buckets[-1] if len(buckets) and e.graph_overflow == "eager" else 0.0,
        **admission_fields(e, admit),
    }
    return limits, buckets, notes


def states_held(design: Design, e) -> str:
    """'' or what the linear layers' states held outside the KV pool took from it (check_requests)."""
    state = float(design.memory.get("state_bytes_per_seq", 0.0))
    kind = state_pool_kind(state, e)
    if kind == "none":
        return ""
    if kind == "ratio":
        return f"after the state pool (engine.state_pool_ratio={e.state_pool_ratio}) "
    return (
        f"after {int(e.max_batch)} sequences' states of {state / GIB:.3f} GiB each "
        "(engine.max_batch: one state per sequence the engine may run) "
    )


def check_requests(cfg, design: Design, eng: np.ndarray, prompt, output, ready: bool) -> None:
    """Infeasible for requests the engine could never schedule: longer than the model's context, a
    prompt prefilled whole beyond the step budget, or more KV than the pool holds."""
    e = cfg.engine
    longest = int(np.argmax(prompt + output))
    if prompt[longest] + output[longest] > cfg.model.max_context:
        raise Infeasible(
            f"a request of {prompt[longest]:.0f} + {output[longest]:.0f} tokens "
            f"exceeds max_context={cfg.model.max_context} of {cfg.model.name}"
        )
    budget = eng[Eng.MAX_TOKENS]
    if not ready and eng[Eng.CHUNK] == 0 and prompt.max() > budget:
        raise Infeasible(
            f"a prompt of {prompt.max():.0f} tokens exceeds engine."
            f"max_tokens_per_step={budget:.0f} with whole-prompt prefill "
            "(engine.chunk_size=0)"
        )
    # queue: the reservation at admission; preempt: a recompute of prompt + o - 1 generated
    # tokens (a request is done at o), which is at least what its cache ever holds
    held = max_held(prompt, output, design.kv_caps) if e.on_kv_full == "queue" else prompt + output - 1.0
    need = max(float(SK.kv_blocks(n, eng)) for n in np.unique(held))
    cap_blocks, block, per_tok = eng[Eng.CAP_BLOCKS], eng[Eng.BLOCK], kv_bytes_per_token_chip(design)
    if need > cap_blocks:
        raise Infeasible(
            f"a request needs {need * block * per_tok / GIB:.2f} GiB of KV per chip; "
            f"the KV pool holds {cap_blocks * block * per_tok / GIB:.2f} GiB "
            + states_held(design, e)
            + (
                f"(engine.kv_mem_fraction={e.kv_mem_fraction} of the HBM left after weights"
                + (" and the start-up profile's activations)" if e.profile_reserve else ")")
                if e.kv_mem_basis == "free"
                else f'(engine.kv_mem_basis={e.kv_mem_basis}: docs/model.md, "Serving: continuous batching")'
            )
        )


def engine_inputs(
    cfg, design: Design, prompt, output, ready: bool = False
) -> Tuple[np.ndarray, np.ndarray, list]:
    """The engine vector (layout.py Eng, every field by name) and bucket list for the kernel;
    raises Infeasible for requests that could never be scheduled. ready: the requests arrive with
    their prompt's KV (Eng.READY, a disaggregated decode pool), so no prompt is prefilled whole."""
    e, w = cfg.engine, cfg.workload
    check_engine(e)
    limits, buckets, notes = step_limits(cfg)
    per_tok = kv_bytes_per_token_chip(design)
    paging = kv_paging(cfg, design, per_tok)
    spec_k, spec_tok = mtp.engine_slots(cfg)
    eng = Eng.vector(
        {
            **limits,
            **sliding_fields(design, e),
            **eager_fields(cfg, design),
            "order": ORDERS.index(e.order),
            "mixed": 1.0 if e.mixed_steps else 0.0,
            "preempt": 1.0 if e.on_kv_full == "preempt" else 0.0,
            "cap_blocks": np.floor(design.memory["kv_pool_bytes"] / max(per_tok, 1e-30) / paging["block"]),
            **paging,
            "closed": 1.0 if w.kind == "closed_loop" else 0.0,
            "overlap": 1.0 if e.overlap else 0.0,
            # the engine loop's host work replaces the hardware's per-step host cost (serving_hw)
            "host_iter": design.hw[Hw.HOST_STEP] if e.host_iter_us is None else e.host_iter_us * 1e-6,
            "host_req": e.host_per_req_us * 1e-6,
            "lookahead": 1.0 if (e.overlap and e.lookahead) else 0.0,
            "late_send": 1.0 if (e.overlap and e.lookahead) else 0.0,
            "spec_k": spec_k,
            "spec_tok": spec_tok,
            "ready": 1.0 if ready else 0.0,
            # a disaggregated decode pool's requests come from its prefill pool: every round
            "recv_interval": 1.0 if ready else float(e.recv_interval),
            # one-pool serving sets it (prepare: adp_release); a disaggregated pool keeps 1: its
            # prefill ranks decode nothing to wait for, its decode ranks get no prompts
            "adp_release": 1.0,
            **batch_wait_fields(cfg, limits["max_tokens"], ready),
        }
    )
    check_requests(cfg, design, eng, prompt, output, ready)
    return eng, buckets, notes


def batch_wait_fields(cfg, budget: float, ready: bool) -> Dict[str, float]:
    """Eng.WAIT_ITERS and WAIT_TOKENS (recv.py batch_held): engine.batch_wait_timeout_iters and
    batch_wait_max_tokens_ratio x the step budget; off under data-parallel attention (TensorRT-LLM's
    _schedule waits only without it) and in a disaggregated decode pool (no prompts to hold)."""
    e = cfg.engine
    if ready or parallel.serving_groups(cfg) > 1:
        return {"wait_iters": 0.0, "wait_tokens": 0.0}
    return {
        "wait_iters": float(e.batch_wait_timeout_iters),
        "wait_tokens": float(e.batch_wait_max_tokens_ratio) * float(budget),
    }
