"""The sampler family: the engine's sampler as a cost (docs/model.md, "The engine's sampler").

A serving engine samples each emitted token from the FP32 logits of its vocabulary. How much that
costs depends on what the request asks for and on the engine's code path:
- `engine.sampler.model_defaults`: a request that names no sampling parameters (the benchmark
  clients of the shipped rows send only max_tokens, min_tokens and ignore_eos) is sampled with the
  model's `generation_defaults` (its checkpoint's generation_config.json), else greedily;
- `engine.sampler.topk_topp`: a top-p request (0 < top_p < 1, temperature > 0) runs a fused
  sampling kernel (`kernel`) or a full sort of the batch x vocabulary logits (`sort`: vLLM 0.12's
  PyTorch path, the FlashInfer kernel being opt-in there).

`kernel` (and greedy sampling, and a top-k-only request, which needs a top-k, not a sort) keep the
sampling op's roofline cost: one pass over the FP32 logits. `sort` costs the op by the chip's
`hardware.op_fit.sampler.sort` law, t = t0 + ns_per_elem x rows x V for the filter (fitted to a
microbenchmark of that path) plus REST_BYTES per logit at the HBM peak for the passes around it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Iterable, List, Optional, Tuple

import numpy as np

from decodelab.opcost.base import Ctx, Price, Step, hbm_bw
from decodelab.kernel_layout import Law, Lin

NAME = "sampler"
FIT_GROUPS = ("sampler",)
SAMPLER_PATHS = ("kernel", "sort")
LAW_PATHS = tuple(p for p in SAMPLER_PATHS if p != "kernel")  # the keys of hardware.op_fit.sampler
# generation_config.json keys vLLM's get_diff_sampling_param reads -> (valid, what a value must be)
GEN_RULES = {
    "temperature": (lambda v: v >= 0, ">= 0"),
    "top_k": (lambda v: v == -1 or (v >= 0 and v.is_integer()), "-1, 0 or a whole number of tokens"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "repetition_penalty": (lambda v: v > 0, "> 0"),
}
GEN_KEYS = tuple(GEN_RULES)
# Bytes per logit that vLLM 0.12's sampler moves outside the top-k / top-p filter the law is fitted
# to (vllm-0.12.0 wheel, v1/sample/sampler.py Sampler.forward / sample, v1/sample/ops/
# topk_topp_sampler.py forward_native and random_sample): BF16 -> FP32 cast (read 2, write 4),
# temperature division in place (4 + 4), softmax (two reads and a write: 12), the exponential draw
# (write 4), probs / q in place (8 + 4), argmax (read 4).
REST_BYTES = 46.0


def _engine_sampler(cfg):
    eng = getattr(cfg, "engine", None)
    return getattr(eng, "sampler", None) if eng is not None else None


def check(hw) -> List[str]:
    """The keys of hardware.op_fit.sampler (the laws' values: opcost.registry.check)."""
    return [
        f"hardware.op_fit.sampler.{key}: the key must be one of: {', '.join(LAW_PATHS)}"
        for key in getattr(hw.op_fit, "sampler", None) or {}
        if key not in LAW_PATHS
    ]


def check_request(cfg) -> List[str]:
    """Errors of engine.sampler and model.generation_defaults (one line each): what a request is
    sampled with."""
    e = []
    smp = _engine_sampler(cfg)
    if smp is not None and smp.topk_topp not in SAMPLER_PATHS:
        e.append(f"engine.sampler.topk_topp={smp.topk_topp!r} is not one of: {', '.join(SAMPLER_PATHS)}")
    gen = getattr(cfg.model, "generation_defaults", None) or {}
    for key, v in gen.items():
        if key not in GEN_KEYS:
            e.append(f"model.generation_defaults.{key}: the key must be one of: {', '.join(GEN_KEYS)}")
            continue
        try:
            v = float(v)
        except (TypeError, ValueError):
            e.append(f"model.generation_defaults.{key}={v!r} must be a number")
            continue
        valid, allowed = GEN_RULES[key]
        if not (np.isfinite(v) and valid(v)):
            e.append(f"model.generation_defaults.{key}={v:g} must be {allowed}")
    return e


def path(cfg) -> str:
    """The sampler path a request without sampling parameters takes on the design's engine:
    "sort" (costed by op_fit.sampler.sort) or "" (one pass over the logits)."""
    smp = _engine_sampler(cfg)
    if smp is None or not smp.model_defaults or smp.topk_topp != "sort":
        return ""
    gen = getattr(cfg.model, "generation_defaults", None) or {}
    temperature = float(gen.get("temperature", 1.0))
    top_p = float(gen.get("top_p", 1.0))
    return "sort" if temperature > 0 and 0 < top_p < 1 else ""


def law(path: str, hw, vocab: int) -> Optional[SimpleNamespace]:
    """The sampling op's cost on this chip under sampler path `path` (path(cfg)): t0 (s) and seconds
    per sampled token, or None (the roofline pass: path "" or no law for the path on this chip)."""
    if not path or getattr(hw, "op_model", "roofline") != "fitted":
        return None
    fit = (getattr(hw.op_fit, "sampler", None) or {}).get(path)
    if fit is None:
        return None
    per_tok = float(fit.ns_per_elem) * 1e-9 * vocab + REST_BYTES * vocab / hbm_bw(hw)
    return SimpleNamespace(path=path, t0=float(fit.t0_us) * 1e-6, s_per_tok=per_tok)


def time(smp: SimpleNamespace, rows) -> np.ndarray:
    """Seconds of the sampling op over `rows` sampled tokens under law `smp`."""
    return smp.t0 + smp.s_per_tok * np.asarray(rows, float)


def standalone_note(ctx: Ctx) -> Optional[str]:
    """A run note when the engine samples by a path the chip has no law for, or by a law that is
    not the chip's own measurement (its `caveat`)."""
    p, hw = ctx.sampler_path, ctx.hw
    if not p:
        return None
    laws = getattr(hw.op_fit, "sampler", None) or {}
    if getattr(hw, "op_model", "roofline") != "fitted" or p not in laws:
        return (
            f"engine.sampler.topk_topp={p}: the model's generation_defaults make every request a top-p "
            f"request, but hardware.op_fit.sampler has no {p!r} law on this chip: the sampling op is "
            'costed as one pass over the logits (docs/model.md, "The engine\'s sampler")'
        )
    caveat = str(getattr(laws[p], "caveat", "") or "")
    if caveat:
        return f"engine.sampler.topk_topp={p}: the sampling op is costed by hardware.op_fit.sampler.{p}, {caveat}"
    return None


def matches(op) -> bool:
    return op.kind == "sample"


def price(op, ctx: Ctx) -> Optional[Price]:
    """A GEMM law without its compute term: t0 + s_per_tok x tokens (None: one pass over the logits)."""
    smp = law(ctx.sampler_path, ctx.hw, ctx.vocab)
    if smp is None:
        return None
    cols = {Lin.T0: smp.t0, Lin.G_AM: smp.s_per_tok, Lin.G_P: 1.0}
    return Price(NAME, Law.GEMM, cols, whole=True, law=smp)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    return float(time(p.law, step.tokens)) - p.law.t0, p.law.t0, 0.0


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    return None  # one pass over the logits is this op's own cost (standalone_note says why)


def filter_ms(t0_us: float, ns_per_elem: float, elems) -> np.ndarray:
    """Milliseconds of the top-k / top-p filter the `sort` law is fitted to, over `elems` = batch x
    vocabulary logits (the law's own form, without the passes around it)."""
    return t0_us * 1e-3 + ns_per_elem * 1e-6 * np.asarray(elems, float)


def fit(rows: Iterable[Tuple[float, float, float]]) -> Tuple[float, float, float]:
    """(t0_us, ns_per_elem, MAPE %) of t = t0 + ns_per_elem x batch x vocab over microbenchmark rows
    (batch, vocab, latency_ms), least squares in relative error."""
    b, v, ms = (np.asarray(x, float) for x in zip(*rows))
    n = b * v
    w = 1.0 / ms
    a = np.c_[np.ones_like(n), n] * w[:, None]
    (t0, c), *_ = np.linalg.lstsq(a, ms * w, rcond=None)
    if t0 < 0:  # no fixed part the rows can support: proportional to the elements alone
        t0, c = 0.0, float(np.sum(n * w * w * ms) / np.sum((n * w) ** 2))
    t0_us, ns = float(t0 * 1e3), float(c * 1e6)
    return t0_us, ns, float(100 * np.mean(np.abs(filter_ms(t0_us, ns, n) / ms - 1)))
