"""The one-line label of a design (the run name in MLflow, the title of its table)."""

from __future__ import annotations


def run_label(cfg, metrics=None) -> str:
    """`metrics`: the result's, when known; with workload.batch_fill the label names the batch
    actually simulated (metrics["batch_size"]), not the configured one."""
    w = cfg.workload
    c = getattr(cfg, "coe", None)
    if c is not None and c.enabled:  # Composition of Experts (decodelab.modes.coe)
        return (
            f"coe {c.n_experts} x {c.expert.name} | {cfg.hardware.name} tp{cfg.hardware.tensor_parallel}"
            f" | {cfg.optimizations.name} | b{c.batch_size} {c.prompt_len}+{c.output_len}"
        )
    load = f"b{w.batch_size}"
    if w.get("batch_fill", False):
        filled = (metrics or {}).get("batch_size")
        load = f"b{int(filled)} fill" if filled else "b-fill"
    if w.get("kind", "static") != "static":  # serving: clients or arrival rate, and engine
        load = (
            f"{cfg.engine.name} c{w.concurrency}"
            if w.kind == "closed_loop"
            else f"{cfg.engine.name} {w.trace or f'{w.arrival_rate:g}/s'}"
        )
    hw = cfg.hardware
    par = f"tp{hw.tensor_parallel}"  # + pipeline stages and attention groups where set
    par += f" pp{hw.pipeline_parallel}" if hw.get("pipeline_parallel", 1) != 1 else ""
    par += f" adp{hw.attention_dp}" if hw.get("attention_dp", 1) != 1 else ""
    where = f"{cfg.hardware.name} {par}"
    d = cfg.get("disagg")
    if d is not None and d.enabled:  # disaggregated serving (decodelab.modes.serving.disagg)
        where = f"{d.name} P {_pool(cfg, 'prefill')} D {_pool(cfg, 'decode')}"
    return f"{cfg.model.name} | {where} | {cfg.kv_policy.name} | {cfg.optimizations.name} | {load} {w.prompt_len}+{w.output_len}"


def _pool(cfg, name: str) -> str:
    p = cfg.disagg[name]
    hw = p.hardware if p.hardware is not None else cfg.hardware
    return f"{p.instances}x{hw.name} tp{p.tensor_parallel}"
