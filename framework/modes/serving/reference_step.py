"""One step's time in the pure-Python reference of the serving scheduler
(framework/modes/serving/reference.py), the twin of stepcost.py: the step's aggregates from its
(request, tokens, decode?) list, the target's fused forward, the MTP draft's passes (engine
`spec_k` > 0) and the engine loop's host work, each from the pure-Python step reference
(framework/core/reference.py)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple


from decodelab.core.reference import reference_step_agg
from decodelab.kernel_layout import CAUSES


def aggregates(step: List[tuple], eng: dict, caps, attended, read_and_pairs) -> Tuple[list, list, bool]:
    """([tokens, KV read, pairs, sequences, sampled, emitting sequences], the prefilling sequences'
    [tokens, KV read, pairs, sequences], graphed?) of a step, a decode-only one padded to its
    CUDA-graph bucket (reference.py's `attended` and `read_and_pairs` give each sequence's share)."""
    tokens = kv_read = pairs = sampled = emit = 0.0
    pre = [0.0, 0.0, 0.0, 0.0]
    for r, q, dec in step:
        a = attended(r.prompt, r.prompt + r.gen + q - 1, caps) if dec else r.prefilled + q
        rd, pr = read_and_pairs(q, a, eng)
        tokens += q
        kv_read += rd
        pairs += pr
        ends = dec or a >= r.target  # a decode token, or the last position of a prefill
        sampled += q if dec else float(ends)
        emit += float(ends)
        if not dec:
            pre = [pre[0] + q, pre[1] + rd, pre[2] + pr, pre[3] + 1.0]
    seqs = float(len(step))
    all_decode = all(dec for _, _, dec in step)
    agg = [tokens, kv_read, pairs, seqs, sampled, emit]
    if all_decode and eng["buckets"]:
        padded = next((float(b) for b in sorted(eng["buckets"]) if b >= len(step)), seqs)
        agg = [x * padded / seqs for x in agg[:3]] + [padded] + [x * padded / seqs for x in agg[4:]]
    # a decode batch past the largest CUDA graph runs eagerly, as a step with prefill work
    graphed = all_decode and (eng.get("graph_max", 0.0) <= 0 or len(step) <= eng["graph_max"])
    return agg, pre, graphed


def _gpu(cost: Dict[str, float]) -> float:
    return sum(cost[c] for c in CAUSES if c != "host")


def draft_seconds(draft, agg: list, pre: list, graphed: bool, k: int) -> float:
    """GPU seconds of the k MTP draft passes (stepcost.draft_passes): the first over the step's
    tokens, the others one token per emitting sequence. `draft`: (design, mixed design, config)."""
    tokens, kv_read, pairs, seqs, _, emit = agg
    if k <= 0 or emit <= 0 or draft is None:
        return 0.0
    design, mixed, cfg = draft
    d = design if graphed else mixed
    t = _gpu(reference_step_agg(d, cfg, tokens, kv_read, pairs, seqs, emit, *pre))
    if k > 1:
        kv = kv_read - pre[1]
        t += (k - 1) * _gpu(reference_step_agg(d, cfg, emit, kv, kv, seqs, emit))
    return t


def step_seconds(
    step: List[tuple], design, design_mixed, cfg, eng: dict, caps, helpers, draft: Optional[tuple] = None
) -> Tuple[float, float]:
    """Seconds of one step: the target's forward, the draft's passes, the host work
    (stepcost.step_time); and the host's seconds to launch it (exposed or not: Agg.LAUNCH).
    `helpers`: reference.py's (attended, read_and_pairs)."""
    agg, pre, graphed = aggregates(step, eng, caps, *helpers)
    tokens, kv_read, pairs, seqs, sampled, _ = agg
    cost = reference_step_agg(
        design if graphed else design_mixed, cfg, tokens, kv_read, pairs, seqs, sampled, *pre
    )
    gpu = _gpu(cost) + draft_seconds(draft, agg, pre, graphed, int(eng.get("spec_k", 0.0)))
    host = eng["host_iter"] + eng["host_req"] * len(step)  # the engine loop's host work
    # an eager step's kernels dispatched one by one by the host (engine.eager_launch_us)
    dispatch = eng["eager_host"] if (not graphed or eng["eager_decode"]) else 0.0
    launch = host + dispatch
    if eng["overlap"]:  # hidden under the GPU's previous step, except what exceeds it
        host = max(0.0, host + dispatch - gpu)
    else:  # dispatched while the step's own kernels run
        host += max(0.0, dispatch - gpu)
    return gpu + host, launch
