"""PyramidKV (Cai et al., 2024, arXiv 2406.02069): SnapKV selection at prefill with per-layer
budgets that fall linearly with depth (lower layers attend broadly, upper layers to few tokens).
With mean budget B over L layers and the paper's beta, the selected part s = B - w (window
included, reference code) falls linearly from 2s - s/beta in the first layer to s/beta in the
last, every layer keeping the w window tokens too, so the total is L * B, the same as SnapKV
with budget B (beta = 0: uniform, i.e. SnapKV). Budget accounting and granularity as
SnapKV (components/kv_policy/snapkv.py); decode tokens are appended (growing).

  k_l = w + s_0 - l (s_0 - s_{L-1}) / (L - 1)       layer_budgets()
  stored(P, t) = mean_l kept_l(P) + t,  kept_l(P) = SnapKV's kept prompt with budget k_l
  kernel caps: prompt_cap = the union bound at the mean budget B (exact when P >= k_0; for
  shorter prompts the ragged layers keep less than min(P, B) and the caps overstate)
"""

from __future__ import annotations

from typing import List

from decodelab.components.kv_policy import cost, snapkv


def layer_budgets(pol, n_layers: int) -> List[float]:
    """Per-layer prompt budgets in the units of kv_policy.budget (window included when
    budget_includes_window, as SnapKV). The pyramid applies to the selected part (budget - w with
    the window included, as the reference code KVCache-Factory/pyramidkv_utils.py does): the last
    layer selects sel / beta, the first 2 sel - sel / beta, linear in between (the paper's
    arithmetic sequence over L - 1 steps, so the mean is exactly the budget); the w window tokens
    are kept in every layer."""
    sel, shared = snapkv.selected_and_shared(pol, pol.budget)
    extra = shared if pol.budget_includes_window else 0.0
    if pol.pyramid_beta <= 0 or n_layers < 2:
        return [sel + extra] * n_layers
    last = sel / pol.pyramid_beta
    first = 2.0 * sel - last
    return [first - l * (first - last) / (n_layers - 1) + extra for l in range(n_layers)]


def check(pol, model) -> list:
    e = []
    cost.check_selection(pol, model, e)
    snapkv.check_budget(pol, e)
    if pol.pyramid_beta < 0:
        e.append(f"kv_policy.pyramid_beta={pol.pyramid_beta} must be >= 0 (0 = uniform budgets)")
    elif 0 < pol.pyramid_beta < 1:  # first layer 2 s - s / beta: below the last, < 0 under 0.5
        e.append(
            f"kv_policy.pyramid_beta={pol.pyramid_beta} must be 0 (uniform budgets) or >= 1 "
            "(the last layer selects (budget - window) / beta, the first twice the mean minus that)"
        )
    return e


def _kept(pol, prompt_len, model) -> float:
    n = model.n_layers if model is not None else 1
    return sum(snapkv.kept_prompt(pol, prompt_len, k, model) for k in layer_budgets(pol, n)) / n


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    return _kept(pol, prompt_len, model) + generated


def kernel_params(pol, model=None) -> dict:
    return snapkv.kernel_params(pol, model)


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    if prompt_len <= sum(snapkv.selected_and_shared(pol, min(layer_budgets(pol, model.n_layers)))):
        return dict(cost.NO_COST)
    return cost.scoring_cost(pol, model, prompt_len, _kept(pol, prompt_len, model), kv_bytes, act_bytes)
