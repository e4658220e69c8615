"""Speed of the serving scheduler (part of `decodelab bench`): 10,000 closed-loop requests of
1k prompt / 512 output tokens after JIT, and the Numba scheduler against its pure-Python
reference (framework/modes/serving/reference.py) on the same small workload."""

from __future__ import annotations

import time

from omegaconf import OmegaConf

from decodelab.apps.common import best_time as _best
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving import scheduler as SK
from decodelab.core.build import build
from decodelab.modes.serving.reference import engine_dict, reference_serve

N_REQUESTS, PROMPT, OUTPUT, CONCURRENCY = 10_000, 1024, 512, 64
TARGET_S, TARGET_SPEEDUP = 1.0, 100.0


def _serving_cfg(cfg, n: int, prompt: int, output: int, concurrency: int):
    c = cfg.copy()
    OmegaConf.set_readonly(c, False)
    w = c.workload
    w.kind, w.n_requests, w.concurrency = "closed_loop", n, concurrency
    w.prompt_len, w.output_len = prompt, output
    return c


def measure(cfg) -> dict:
    """Times of the scheduler kernel alone (inputs prepared beforehand) and of the reference."""
    big = _serving_cfg(cfg, N_REQUESTS, PROMPT, OUTPUT, CONCURRENCY)
    design = build(big)
    p = S.prepare(big, design)
    t0 = time.perf_counter()
    S.simulate_serving(_serving_cfg(cfg, 4, 16, 4, 2), design)  # JIT or cache load
    jit = time.perf_counter() - t0
    n_steps = len(SK.serve(*p["kernel_args"])[1])
    serve = _best(lambda: SK.serve(*p["kernel_args"]), 3)
    small = _serving_cfg(cfg, 32, PROMPT, 64, 8)
    sd = build(small)
    q = S.prepare(small, sd)
    numba_small = _best(lambda: SK.serve(*q["kernel_args"]), 20)
    eng = engine_dict(q["eng"], q["buckets"])
    ref = _best(
        lambda: reference_serve(
            sd, small, q["mixed"], eng, q["arrival"], q["prompt"], q["output"], q["think"]
        ),
        1,
    )
    return {
        "jit_s": jit,
        "serve_10k_s": serve,
        "steps_10k": float(n_steps),
        "step_us": serve / n_steps * 1e6,
        "numba_small_s": numba_small,
        "reference_small_s": ref,
        "speedup_vs_python": ref / numba_small,
    }


def rows(r: dict):
    """(measure, value, target) rows for the bench table, and whether the targets are met."""
    ok = r["serve_10k_s"] <= TARGET_S and r["speedup_vs_python"] >= TARGET_SPEEDUP
    return [
        ("serving: JIT compile / cache load", f"{r['jit_s']:.3f} s", ""),
        (
            f"serving: {N_REQUESTS} requests {PROMPT}+{OUTPUT}, {CONCURRENCY} clients",
            f"{r['serve_10k_s']:.3f} s ({r['steps_10k']:.0f} steps, {r['step_us']:.2f} us/step)",
            f"<= {TARGET_S:g} s",
        ),
        (
            "serving: Numba speedup over Python reference",
            f"{r['speedup_vs_python']:.0f}x",
            f">= {TARGET_SPEEDUP:g}x",
        ),
    ], ok
