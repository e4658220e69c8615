"""`decodelab bench [overrides]`: in-process speed of the simulation kernel after JIT.

Reports the time of one decode-step evaluation (a long decode walked by one kernel call, divided
by its steps, and one single-step call including Numba's dispatch), and the speedup of the Numba
kernel over the pure-Python reference (framework/core/reference.py) on the same steps."""

from __future__ import annotations

import sys
import time
from typing import List, Tuple
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError, Infeasible
from decodelab.apps import design_bench, serving_bench
from decodelab.apps.common import best_time, errors, run_module
from decodelab.config import compose as C


def measure(cfg, n_steps: int = 4096, ref_steps: int = 256) -> dict:
    design = build(cfg)
    args = design.arrays()
    w = cfg.workload
    steps = K.request_steps(w.batch_size, w.prompt_len, n_steps + 1)[1:]
    one = steps[:1].copy()
    t0 = time.perf_counter()
    K.simulate(*args, one)  # JIT compile or load from cache
    jit_s = time.perf_counter() - t0
    walk = best_time(lambda: K.simulate(*args, steps), 5)
    single = best_time(lambda: K.simulate(*args, one), 2000)
    sub = steps[:ref_steps]
    numba_sub = best_time(lambda: K.simulate(*args, sub), 20)
    ref = best_time(lambda: reference_simulate(design, cfg, sub), 3)
    return {
        "jit_or_cache_load_s": jit_s,
        "step_us_in_walk": walk / n_steps * 1e6,
        "step_us_single_call": single * 1e6,
        "reference_step_us": ref / ref_steps * 1e6,
        "speedup_vs_python": ref / numba_sub,
        "kernel_calls_per_step": float(design.call_rep.sum()),
        "ops": len(design.ops),
    }


def add_arguments(p) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides of the design")


def table_rows(cfg, overrides: List[str]) -> Tuple[List[Tuple[str, str, str]], bool]:
    """The rows (measure, value, target) of the bench table and whether every target is met."""
    r = measure(cfg)
    rows = [
        ("JIT compile / cache load", f"{r['jit_or_cache_load_s']:.3f} s", ""),
        ("decode step, inside a walk", f"{r['step_us_in_walk']:.2f} us", ""),
        ("decode step, one call (with dispatch)", f"{r['step_us_single_call']:.2f} us", "<= 20 us"),
        ("pure-Python reference step", f"{r['reference_step_us']:.1f} us", ""),
        ("Numba speedup over Python", f"{r['speedup_vs_python']:.0f}x", ">= 100x"),
    ]
    serving_rows, serving_ok = serving_bench.rows(serving_bench.measure(cfg))
    design_rows, design_ok = design_bench.rows(design_bench.measure(overrides))
    ok = r["step_us_single_call"] <= 20.0 and r["speedup_vs_python"] >= 100.0 and serving_ok and design_ok
    return rows + [tuple(x) for x in serving_rows + design_rows], ok


def compose_design(overrides: List[str]):
    """The design to time, built once (bad input: ConfigError or Infeasible, before any timing)."""
    cfg = C.compose_or_error(overrides)
    build(cfg)
    return cfg


def run(a) -> int:
    from rich.console import Console
    from rich.table import Table

    try:
        cfg = compose_design(a.overrides)
    except (ConfigError, Infeasible) as e:
        return errors(str(e))
    rows, ok = table_rows(cfg, a.overrides)
    t = Table(title=f"decodelab bench: {cfg.model.name} on {cfg.hardware.name}")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("target", justify="right")
    for row in rows:
        t.add_row(*row)
    Console().print(t)
    return 0 if ok else 1


def main(argv: List[str]) -> int:
    return run_module("bench", sys.modules[__name__], argv)
