"""Static graphs (workload.static_graph): a dataflow deployment compiles a menu of graphs per model,
each for a (max sequence, batch) shape (model.static_graphs), and a request runs on the smallest
graph whose max sequence holds its prompt + output; the graph fixes the batch (the largest batch
compiled at that length) and every sequence slot holds max-sequence KV, whatever the request's
own length. Throughput is therefore a function of the context: a longer context moves to a larger
graph with (usually) a smaller batch."""

from __future__ import annotations

from typing import List, Tuple

from decodelab.core.build import build
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.resolve import with_fields


def pick_graph(menu: List[List[int]], seq: int, name: str = "model") -> Tuple[int, int]:
    """(max sequence, batch) of the graph a sequence of `seq` tokens runs on."""
    bad = [g for g in menu if len(g) != 2 or min(g) < 1]
    if not menu or bad:
        raise ConfigError(
            f"model.static_graphs of {name} must be a non-empty list of [max_sequence, batch] pairs "
            f"(>= 1) with workload.static_graph=true; got {list(map(list, menu))}"
        )
    fits = [(int(s), int(b)) for s, b in menu if s >= seq]
    if not fits:
        raise Infeasible(
            f"no static graph of {name} holds {seq} tokens; graphs (max sequence, batch): "
            + ", ".join(f"({s}, {b})" for s, b in menu)
        )
    s_min = min(s for s, _ in fits)
    return s_min, max(b for s, b in fits if s == s_min)


def resolve_graph(cfg):
    """With workload.static_graph, a copy of cfg whose batch is the chosen graph's, after checking
    that the graph's static slots (max-sequence KV per slot) fit; returns (cfg, graph or None)."""
    w = cfg.workload
    if not getattr(w, "static_graph", False):
        return cfg, None
    seq, batch = pick_graph(list(cfg.model.static_graphs), w.prompt_len + w.output_len, cfg.model.name)
    out = with_fields(cfg, {"workload.batch_size": batch, "workload.batch_fill": False})
    # static shape: every slot holds max-sequence KV
    slots = with_fields(out, {"workload.prompt_len": seq - w.output_len, "speculative.enabled": False})
    build(slots)  # Infeasible when the graph's slots do not fit
    return out, (seq, batch)
