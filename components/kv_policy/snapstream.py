"""SnapStream (Li et al., 2025, arXiv 2511.03092): a static-shape KV slot per sequence,
[ `sinks` attention sinks | `budget` = K prompt tokens chosen once at prefill by SnapKV scoring,
then frozen | ring buffer of the `window` = R most recent tokens ]. Prefill attends the whole
prompt, scores it with the last `obs_window` queries (SnapKV), keeps the sinks, the top-K of the
middle and the prompt's last R tokens in the ring; every decode step writes its token into the
ring (overwriting the oldest) and attends the slot, StreamingLLM-style. The slot has a constant
capacity C = S + K + R, so graph shapes are static under continuous batching.

The paper publishes none of S, K, R, the window or the pooling (shared/reference/claims.md): they
are parameters (conf/kv_policy/snapstream.yaml states the chosen ones;
sweeps/studies/kv_snapstream_params.yaml sweeps them). Granularity: MLA models (DeepSeek-R1) select per layer, shared by all heads; per query
head on GQA, a KV head holds S + R + G K at most.

  stored(P, t) = min(P + t, C)      read per step = stored      slot = C tokens (static)
  prefill = SnapKV scoring of the prompt (cost.scoring_cost) + gathering the C kept tokens
"""

from __future__ import annotations

from decodelab.components.kv_policy import cost


def capacity(pol, model=None) -> float:
    return cost.union_kept(float(pol.sinks + pol.window), float(pol.budget), cost.group(pol, model))


def check(pol, model) -> list:
    e = []
    cost.check_selection(pol, model, e)
    if pol.sinks < 0:
        e.append(f"kv_policy.sinks={pol.sinks} must be >= 0")
    if pol.budget < 0:
        e.append(f"kv_policy.budget={pol.budget} must be >= 0 (top-K prompt tokens kept)")
    limit = getattr(model, "max_context", None) if model is not None else None
    if limit and pol.budget >= 0 and pol.window >= 1 and capacity(pol, model) > limit:
        e.append(
            f"kv_policy.budget={pol.budget}: the SnapStream slot (sinks {pol.sinks} + budget + window "
            f"{pol.window} = {capacity(pol, model):.0f} tokens) is larger than the model's context, "
            f"model.max_context={limit}; give a budget (and window) whose slot is <= {limit} tokens"
        )
    if pol.window < 1:
        e.append(f"kv_policy.window={pol.window} must be >= 1 (ring of recent tokens; decode writes there)")
    elif pol.obs_window > pol.window:
        e.append(
            f"kv_policy.obs_window={pol.obs_window} must be <= window={pol.window}: the "
            "ring holds the prompt's tail the observation queries come from (prompt keys "
            "between them would be neither scored nor kept)"
        )
    return e


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    return float(min(prompt_len + generated, capacity(pol, model)))


def kernel_params(pol, model=None) -> dict:
    c = capacity(pol, model)
    return {"prompt_cap": c, "total_cap": c, "read_cap": 0.0}


def slot_layout(pol) -> str:
    return "static"


def slot_capacity(pol, model=None) -> float:
    return capacity(pol, model)


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    c = capacity(pol, model)
    if prompt_len <= c:
        return dict(cost.NO_COST)  # the whole prompt fits the slot: nothing to select
    return cost.scoring_cost(pol, model, prompt_len, c, kv_bytes, act_bytes)
