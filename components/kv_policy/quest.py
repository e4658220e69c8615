"""Quest (Tang et al., ICML 2024, arXiv 2406.10774): query-aware sparsity on the read side. The
cache keeps every token (nothing is evicted) in pages of `page_size` tokens (16), each with the
element-wise min and max of its keys. Every decode step scores the pages' upper bounds against
the query and reads only the top `top_k_pages` pages (or, with top_k_pages = 0, the pages that
hold a token budget of `budget`); the first `dense_layers` layers (2) read the whole cache. Quest saves reads, not memory: memory grows by the page metadata.

Per sequence, with n = P + t tokens held, ps = page_size, K = pages read, d of L layers dense,
m = metadata token-equivalents per page (min + max keys = 2 keys: 1 token's K+V for GQA/MHA,
2 latents for MLA, whose "key" is the whole latent):
  memory  = n + (L - d)/L * m * ceil(n / ps)
  read    = d/L * n + (L - d)/L * (min(n, K ps) + m * ceil(n / ps))      (layer-averaged)
  caps    = read_cap K * ps; the metadata reads and the dense layers are what read_tokens adds
  prefill = per layer: the prompt's keys read once and min/max reduced (2 P Hkv dk FLOPs), the
            metadata written
"""

from __future__ import annotations

from decodelab.components.kv_policy import cost


def pages_read(pol) -> float:
    """Pages read per step: top_k_pages, or the token budget rounded up to whole pages."""
    if pol.top_k_pages > 0:
        return float(pol.top_k_pages)
    return cost.ceil_div(pol.budget, pol.page_size)


def _meta_per_page(model) -> float:
    if model is None:
        return 1.0
    s = cost.kv_shape(model)
    return 2.0 * s["Hkv"] * s["dk"] / s["kv_elems"]


def _sparse_frac(pol, model) -> float:
    if model is None:
        return 1.0
    return (model.n_layers - pol.dense_layers) / model.n_layers


def check(pol, model) -> list:
    e = []
    if pol.page_size < 1:
        e.append(f"kv_policy.page_size={pol.page_size} must be >= 1 (tokens per page)")
    if pol.top_k_pages < 0 or (pol.top_k_pages == 0 and pol.budget < 1):
        e.append(
            f"kv_policy.top_k_pages={pol.top_k_pages} must be >= 1 (pages read per step), or 0 "
            f"with kv_policy.budget >= 1 tokens read per step (got budget={pol.budget})"
        )
    if pol.dense_layers < 0 or (model is not None and pol.dense_layers >= model.n_layers):
        e.append(f"kv_policy.dense_layers={pol.dense_layers} must be in [0, n_layers)")
    return e


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    n = float(prompt_len + generated)
    return n + _sparse_frac(pol, model) * _meta_per_page(model) * cost.ceil_div(n, pol.page_size)


def kernel_params(pol, model=None) -> dict:
    return {"prompt_cap": 0.0, "total_cap": 0.0, "read_cap": pages_read(pol) * pol.page_size}


def read_tokens(pol, model, stored: float) -> float:
    f = _sparse_frac(pol, model)
    n = float(stored)
    sparse = min(n, pages_read(pol) * pol.page_size) + _meta_per_page(model) * cost.ceil_div(n, pol.page_size)
    return (1.0 - f) * n + f * sparse


def read_coeffs(pol, model) -> dict:
    """read_tokens(n) = dense n + (1 - dense) min(n, cap) + meta ceil(n / page): meta from n = page."""
    dense = pol.dense_layers / model.n_layers
    page = float(pol.page_size)
    cap = kernel_params(pol, model)["read_cap"]
    return {
        "dense": dense,
        "page": page,
        "meta": read_tokens(pol, model, page) - dense * page - (1 - dense) * min(page, cap),
    }


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    s = cost.kv_shape(model)
    P = float(prompt_len)
    layers = s["L"] - pol.dense_layers
    keys = P * s["Hkv"] * s["dk"]
    pages = cost.ceil_div(P, pol.page_size)
    return {
        "flops": layers * 2.0 * keys,
        "bytes": layers * (keys + pages * 2.0 * s["Hkv"] * s["dk"]) * kv_bytes,
    }
