"""One model's design, whatever its workload: batch fill first (the largest batch that fits), then
the serving simulation (workload.kind closed_loop / open_loop; disaggregated pools with disagg.enabled), speculative decoding
(speculative.enabled) or the static decode. Never raises for bad or infeasible designs."""

from __future__ import annotations

from omegaconf.errors import MissingMandatoryValue

from decodelab.core.build import build
from decodelab.core.result import Result
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.batch_fill import resolve_batch
from decodelab.modes.graphs import resolve_graph
from decodelab.modes.resolve import resolved
from decodelab.modes.serving.disagg import evaluate_disagg
from decodelab.modes.serving.simulate import evaluate_serving
from decodelab.modes.speculative import evaluate_speculative
from decodelab.modes.static import evaluate_static


def evaluate_single(cfg, keep_steps: bool = True) -> Result:
    try:
        cfg = resolved(cfg)  # plain values from here on (modes/resolve.py)
        cfg, graph = resolve_graph(cfg)  # workload.static_graph: the graph fixes the batch
        cfg = resolve_batch(cfg)  # workload.batch_fill: the largest batch that fits
        if cfg.disagg.enabled:  # prefill and decode pools of their own (modes/serving/disagg.py)
            return evaluate_disagg(cfg, keep_steps)
        spec_on = cfg.speculative.enabled
        trip = max(cfg.speculative.k, 0) + 1 if spec_on else None  # k < 1: invalid, in the mode
        design = build(cfg, host_round_trip_steps=trip)
        if getattr(cfg.workload, "kind", "static") != "static":
            return evaluate_serving(cfg, design, keep_steps)
        if spec_on:
            res = evaluate_speculative(cfg, design, keep_steps)
        else:
            res = evaluate_static(cfg, design, keep_steps)
        if graph:
            res.metrics.update(graph_max_seq=float(graph[0]), graph_batch=float(graph[1]))
            res.notes.append(f"static graph (max sequence {graph[0]}, batch {graph[1]})")
        return res
    except ConfigError as e:
        return Result.invalid(str(e))
    except MissingMandatoryValue as e:
        return Result.invalid(str(e).splitlines()[0])
    except Infeasible as e:
        return Result.infeasible(str(e))
