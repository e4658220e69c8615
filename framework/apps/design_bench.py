"""Per-design speed for `decodelab bench`: a design given by overrides through the Python API
(`decodelab.evaluate`, warm: its choice of config groups composed before), and a resolved static
design (a core.tree.Tree, 128 decode steps) evaluated again. Best of many, in process."""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Sequence, Tuple

TARGET_EVALUATE_MS = 10.0  # decodelab.evaluate(...) with overrides, warm
TARGET_RESOLVED_MS = 1.0  # a resolved static design of 128 decode steps


def _median_ms(fn, n: int) -> float:
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def measure(overrides: Sequence[str] = (), n: int = 200) -> Dict[str, float]:
    """Median ms of decodelab.evaluate(overrides + a batch size that changes every call) and of
    modes.dispatch.evaluate on the resolved design with output_len=128."""
    import decodelab
    from decodelab.config.composition import design_config
    from decodelab.modes.dispatch import evaluate

    ov = [o for o in overrides if not o.startswith("workload.batch_size=")]
    decodelab.evaluate(*ov)  # the choice of groups composed once, the kernel loaded
    api = _median_ms(lambda i: decodelab.evaluate(*ov, f"workload.batch_size={1 + i % 64}"), n)
    tree = design_config([*ov, "workload.output_len=128"])
    evaluate(tree, keep_steps=False)
    resolved = _median_ms(lambda i: evaluate(tree, keep_steps=False), n)
    return {"evaluate_ms": api, "resolved_ms": resolved}


def rows(r: Dict[str, float]) -> Tuple[List[Tuple[str, str, str]], bool]:
    """The bench table's rows and whether both targets hold."""
    out = [
        (
            "decodelab.evaluate(...) with overrides, warm",
            f"{r['evaluate_ms']:.2f} ms",
            f"<= {TARGET_EVALUATE_MS:g} ms",
        ),
        (
            "resolved static design, 128 decode steps",
            f"{r['resolved_ms']:.3f} ms",
            f"<= {TARGET_RESOLVED_MS:g} ms",
        ),
    ]
    ok = r["evaluate_ms"] <= TARGET_EVALUATE_MS and r["resolved_ms"] <= TARGET_RESOLVED_MS
    return out, ok
