"""SnapKV (Li et al., 2024, arXiv 2404.14469): once, at prefill, the last `obs_window` (w) prompt
queries score every prompt key (softmax attention summed over the window), the scores are pooled
(1-D, kernel `pool_kernel`; reference code: avg-pool 5, w = 32; paper: max-pool 7) and the top
tokens are kept together with the window itself; decode tokens are appended (the cache grows one
token per step). No compression when the prompt is within the budget.

Budget accounting: with budget_includes_window (the reference code's max_capacity_prompt) a KV
head keeps top-(B - w) + w = B prompt tokens; without, top-B + w = B + w.
Selection granularity: per KV head (scores averaged over the query group) or per layer keep B
per KV head; per query head (the original code on GQA models) each of the G = heads / kv_heads
query heads keeps its own B - w, so a KV head holds their union, bounded by w + G (B - w) (up to
G times the per-KV-head cache; never more than the prompt). MLA shares one latent per layer, so
only per-layer (or per-KV-head, the same thing) selection is possible.

  kept(P) = P if P <= B_eff else min(P, union bound)     stored(P, t) = kept(P) + t
  read per step = stored;   prefill cost: cost.scoring_cost
"""

from __future__ import annotations

from decodelab.components.kv_policy import cost


def selected_and_shared(pol, budget: float):
    """(tokens each selector picks by score, tokens shared by all selectors: the window)."""
    w = float(pol.obs_window)
    return (budget - w, w) if pol.budget_includes_window else (float(budget), w)


def kept_prompt(pol, prompt_len: float, budget: float, model=None) -> float:
    """Prompt tokens a KV head keeps after selection with a budget of `budget`."""
    sel, shared = selected_and_shared(pol, budget)
    if prompt_len <= sel + shared:
        return float(prompt_len)  # within budget: nothing is evicted
    return float(min(prompt_len, cost.union_kept(shared, sel, cost.group(pol, model))))


def check_budget(pol, errors) -> None:
    if pol.budget < 1:
        errors.append(f"kv_policy.budget={pol.budget} must be >= 1 (prompt tokens kept)")
    elif pol.budget_includes_window and pol.budget <= pol.obs_window:
        errors.append(
            f"kv_policy.budget={pol.budget} must exceed kv_policy.obs_window="
            f"{pol.obs_window} when budget_includes_window (budget = top-(B - w) + w)"
        )


def check(pol, model) -> list:
    e = []
    cost.check_selection(pol, model, e)
    check_budget(pol, e)
    return e


def _prompt_cap(pol, model) -> float:
    sel, shared = selected_and_shared(pol, pol.budget)
    return cost.union_kept(shared, sel, cost.group(pol, model))


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    return kept_prompt(pol, prompt_len, pol.budget, model) + generated


def kernel_params(pol, model=None) -> dict:
    # min(P, cap): for P between the budget and the union bound the caps keep min(P, bound),
    # exactly kept_prompt's value
    return {"prompt_cap": _prompt_cap(pol, model), "total_cap": 0.0, "read_cap": 0.0}


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    if prompt_len <= sum(selected_and_shared(pol, pol.budget)):
        return dict(cost.NO_COST)  # no compression, no scoring
    kept = kept_prompt(pol, prompt_len, pol.budget, model)
    return cost.scoring_cost(pol, model, prompt_len, kept, kv_bytes, act_bytes)
