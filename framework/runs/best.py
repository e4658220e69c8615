"""The designs of a sweep worth a look: the Pareto front of per-user speed against aggregate
throughput, the top N by aggregate throughput, and which designs become MLflow child runs
(`decodelab sweep --children`)."""

from __future__ import annotations

from typing import List, Sequence, Set

import numpy as np

# the trade-off of decode serving: tokens/s each user sees against tokens/s the system produces
OBJECTIVES = ("tok_s_user", "tok_s_aggregate")
RANK_BY = "tok_s_aggregate"
DEFAULT_CHILDREN = "pareto,top:10"


def pareto_mask(x: Sequence[float], y: Sequence[float]) -> np.ndarray:
    """Points not dominated when both coordinates are maximised (ties: the first one kept)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    order = np.lexsort((-y, -x))  # x descending, then y descending
    keep = np.zeros(len(x), bool)
    best_y = -np.inf
    seen = set()
    for i in order:
        if y[i] > best_y:
            if (x[i], y[i]) not in seen:
                keep[i] = True
                seen.add((x[i], y[i]))
            best_y = y[i]
    return keep


def pareto(records: List[dict]) -> List[int]:
    """Positions (in records) of the ok designs on the front of OBJECTIVES."""
    pos = [
        i for i, r in enumerate(records) if r["status"] == "ok" and all(k in r["metrics"] for k in OBJECTIVES)
    ]
    if not pos:
        return []
    x = [records[i]["metrics"][OBJECTIVES[0]] for i in pos]
    y = [records[i]["metrics"][OBJECTIVES[1]] for i in pos]
    return [p for p, k in zip(pos, pareto_mask(x, y)) if k]


def top(records: List[dict], n: int, key: str = RANK_BY) -> List[int]:
    pos = [i for i, r in enumerate(records) if r["status"] == "ok" and key in r["metrics"]]
    return sorted(pos, key=lambda i: -records[i]["metrics"][key])[:n]


def parse_children(spec: str) -> str:
    """Check a --children value: `all`, `none`, or a comma list of `pareto` and `top:N`.
    Raises ValueError."""
    for part in spec.split(","):
        part = part.strip()
        if part in ("all", "none", "pareto"):
            continue
        if part.startswith("top:") and part[4:].isdigit():
            continue
        raise ValueError(spec)
    return spec


def children(records: List[dict], spec: str) -> Set[int]:
    """Positions of the records that become child runs under `spec` (see parse_children)."""
    out: Set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if part == "all":
            return set(range(len(records)))
        if part == "pareto":
            out.update(pareto(records))
        elif part.startswith("top:"):
            out.update(top(records, int(part[4:])))
    return out
