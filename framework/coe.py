"""Composition of Experts evaluation (`coe.enabled=true`, conf/coe/; docs/coe.md).

The router and the expert are ordinary designs on the same hardware: their times come from
`framework.evaluate.evaluate` (the decode model) and their memory from `framework.build.build`.
components/coe.py then places the experts in the memory hierarchy, routes a stream of batches
through an HBM expert cache and adds up routing, switching and execution per batch.

`decodelab coe-plot [sweep.yaml] [out=PATH]` plots latency per batch against the number of
experts for each platform of a sweep (the SN40L paper's Fig. 12 shape) with the time split of the
largest count every platform serves (Fig. 1 shape)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

from omegaconf import OmegaConf

from components import coe as C
from components.placement import GIB
from framework.validate import ConfigError, Infeasible

DEFAULT_PLOT_SWEEP = "c12_latency_vs_experts.yaml"


def check_coe(c, hw) -> None:
    """One line per bad `coe.*` field (or copy bandwidth) (ConfigError)."""
    e = []
    for n in ("n_experts", "batch_size", "prompt_len", "n_batches"):
        if not getattr(c, n) >= 1:
            e.append(f"coe.{n}={getattr(c, n)} must be >= 1")
    if c.output_len < 2:
        e.append(f"coe.output_len={c.output_len} must be >= 2 (the prefill emits the first token)")
    if c.routing not in C.ROUTINGS:
        e.append(f"coe.routing={c.routing!r} is not one of: {', '.join(C.ROUTINGS)}")
    if c.routing == "zipf" and not c.zipf_s > 0:
        e.append(f"coe.zipf_s={c.zipf_s} must be > 0")
    if not hw.backing_copy_gb_s >= 0:
        e.append(f"hardware.backing_copy_gb_s={hw.backing_copy_gb_s} must be >= 0")
    if not c.seed >= 0:
        e.append(f"coe.seed={c.seed} must be >= 0 (numpy random seed)")
    if c.hbm_cache not in C.HBM_CACHES:
        e.append(f"coe.hbm_cache={c.hbm_cache!r} is not one of: {', '.join(C.HBM_CACHES)}")
    if e:
        raise ConfigError("\n".join(e))


def _sub_cfg(cfg, model, batch: int, prompt_len: int, output_len: int):
    """A plain single-model config: `model` on the same hardware, options and dtypes."""
    d = cfg.copy()
    OmegaConf.set_readonly(d, False)
    d.model = model
    d.workload.batch_size, d.workload.prompt_len, d.workload.output_len = batch, prompt_len, output_len
    if "kind" in d.workload:                  # serving simulations: one static batch here
        d.workload.kind = "static"
    d.coe.enabled = False
    d.speculative.enabled = False
    return d


_MEMO: Dict[str, Any] = {}       # resolved sub-config -> (result, design): sweeps over n_experts
                                 # or routing re-use the router and expert runs


def _run(evaluate, build, cfg, what: str):
    key = OmegaConf.to_yaml(cfg, resolve=True)
    if key not in _MEMO:
        res = evaluate(cfg, keep_steps=False)
        if len(_MEMO) >= 64:
            _MEMO.clear()
        _MEMO[key] = (res, build(cfg) if res["status"] == "ok" else None)
    res, design = _MEMO[key]
    if res["status"] == "invalid":
        raise ConfigError(f"{what}: {res['reason']}")
    if res["status"] != "ok":
        raise Infeasible(f"{what}: {res['reason']}")
    return res, design


def _coe(cfg) -> Dict[str, Any]:
    from framework.build import build
    from framework.evaluate import evaluate
    c, hw = cfg.coe, cfg.hardware
    check_coe(c, hw)
    probs = C.routing_probs(c.routing, c.n_experts, c.zipf_s, c.weights)
    ex_res, ex = _run(evaluate, build, _sub_cfg(cfg, c.expert, 1, c.prompt_len, c.output_len),
                      f"coe.expert ({c.expert.name})")
    ro_res, ro = _run(evaluate, build, _sub_cfg(cfg, c.router, c.batch_size, c.prompt_len, 2),
                      f"coe.router ({c.router.name})")
    tp = hw.tensor_parallel
    groups = max(1, hw.n_chips // tp)
    shard = ex.weight_bytes_total / tp                       # one expert on each chip of the group
    expert_kv = max(0.0, sum(ex.memory["used"].values()) - shard)
    reserved = sum(ro.memory["used"].values()) + expert_kv   # router + KV caches stay in HBM
    h = C.hierarchy(hw.tiers, hw.backing_copy_gb_s, shard, reserved, groups)
    if h["experts_hbm"] < 1:
        raise Infeasible(f"router ({c.router.name}) + one expert ({c.expert.name}) + KV do not fit "
                         f"HBM: {(reserved + shard) / GIB:.1f} GiB per chip needed")
    n = c.n_experts
    if n > h["experts_max"]:
        where = (f"and {h['experts_backing']} in {h['backing']}" if h["backing"] else
                 "and has no backing tier (ddr or host) with a copy path into HBM "
                 "(hardware.backing_copy_gb_s)")
        raise Infeasible(f"out of memory: {n} experts of {shard * tp / GIB:.2f} GiB; {hw.name} holds "
                         f"{h['experts_hbm']} in HBM {where}")
    exec_s = ex_res["metrics"]["e2e_ms"] / 1e3               # prefill + output_len - 1 decode steps
    router_s = ro_res["metrics"]["ttft_ms"] / 1e3            # one forward pass over the batch
    spilled = n > h["experts_hbm"]
    slots = C.cache_slots(c.hbm_cache, c.batch_size, h["experts_hbm"])
    sim = C.simulate(probs, c.batch_size, c.n_batches, slots, not spilled, c.seed)
    lat = C.batch_latency(router_s, exec_s, h["switch_s"], sim["switches"], c.batch_size)
    served = h["experts_max"] if h["switch_s"] <= exec_s else h["experts_hbm"]
    accesses = sim["hits"] + sim["misses"]
    m = dict(ex_res["metrics"])                              # one (prompt, expert) run, batch 1
    m.update({
        "coe_latency_ms": float(lat["total"].mean() * 1e3),
        "coe_latency_max_ms": float(lat["total"].max() * 1e3),
        "coe_latency_per_prompt_ms": float(lat["total"].mean() * 1e3 / c.batch_size),
        "coe_routing_ms": float(lat["routing"].mean() * 1e3),
        "coe_switching_ms": float(lat["switching"].mean() * 1e3),
        "coe_execution_ms": float(lat["execution"].mean() * 1e3),
        "coe_router_ms": router_s * 1e3,
        "coe_expert_ms": exec_s * 1e3,
        "coe_switch_ms": h["switch_s"] * 1e3 if h["backing"] else 0.0,
        "coe_copy_gb_s": h["copy_bytes_s"] * tp * groups / 1e9,
        "coe_switches_per_batch": float(sim["switches"].mean()),
        "coe_hit_rate": sim["hits"] / accesses if accesses else 1.0,
        "coe_evictions_per_batch": sim["evictions"] / c.n_batches,
        "coe_expert_gib": shard * tp / GIB,
        "coe_hbm_slots": float(h["experts_hbm"] if not spilled else slots),
        "coe_experts_hbm": float(h["experts_hbm"]),
        "coe_experts_backing": float(h["experts_backing"]),
        "coe_experts_max": float(h["experts_max"]),
        "coe_experts_served": float(served),
        "coe_systems_needed": float(math.ceil(n / served)),
        "coe_spilled": 1.0 if spilled else 0.0,
    })
    notes = [f"CoE {n} x {c.expert.name} + router {c.router.name}, batch {c.batch_size} x "
             f"({c.prompt_len}+{c.output_len}): {m['coe_latency_ms']:.0f} ms per batch = routing "
             f"{m['coe_routing_ms']:.0f} + switching {m['coe_switching_ms']:.0f} "
             f"({m['coe_switches_per_batch']:.1f} x {m['coe_switch_ms']:.1f} ms) + execution "
             f"{m['coe_execution_ms']:.0f} ms; the table above is one (prompt, expert) run",
             f"CoE memory: {h['experts_hbm']} experts fit HBM"
             + (f", {h['experts_backing']} fit {h['backing']}" if h["backing"] else "")
             + (f"; spilled: HBM holds {slots} ({c.hbm_cache})" if spilled else "; all resident")]
    notes.append("CoE: coe.batch_size, coe.prompt_len and coe.output_len define the requests "
                 "(workload batch/prompt/output and speculative decoding are not used)")
    return {"status": "ok", "reason": "", "metrics": m, "notes": notes + list(ex_res["notes"])}


def evaluate_coe(cfg, keep_steps: bool = True) -> Dict[str, Any]:
    """The CoE result, in evaluate()'s shape: {status, reason, metrics, notes}. Never raises."""
    from omegaconf.errors import MissingMandatoryValue
    try:
        return _coe(cfg)
    except (ConfigError, MissingMandatoryValue) as e:
        return {"status": "invalid", "reason": str(e) if isinstance(e, ConfigError)
                else str(e).splitlines()[0], "metrics": {}, "notes": []}
    except Infeasible as e:
        return {"status": "infeasible", "reason": str(e), "metrics": {}, "notes": []}


# --- latency vs number of experts (SN40L paper Fig. 12 / Fig. 1 shape) ---

def sweep_results(path: Path) -> List[Dict[str, Any]]:
    """Evaluate every job of a sweep file (claims format); one row per job."""
    from hydra import compose, initialize_config_dir
    import framework.schema  # noqa: F401
    from framework.app import CONF_DIR
    from framework.claims import expand
    from framework.evaluate import evaluate
    params = OmegaConf.to_container(OmegaConf.load(path).hydra.sweeper.params, resolve=False)
    jobs = expand({k: str(v) for k, v in params.items()})
    rows = []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for job in jobs:
            cfg = compose(config_name="config", overrides=[f"{k}={v}" for k, v in job.items()])
            r = evaluate(cfg, keep_steps=False)
            rows.append({"hardware": cfg.hardware.name, "n_experts": cfg.coe.n_experts,
                         "status": r["status"], "reason": r["reason"], **r["metrics"]})
    return rows


def plot_latency(rows: List[Dict[str, Any]], path: Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    platforms = list(dict.fromkeys(r["hardware"] for r in rows))
    for hw in platforms:
        ok = sorted((r for r in rows if r["hardware"] == hw and r["status"] == "ok"),
                    key=lambda r: r["n_experts"])
        oom = [r["n_experts"] for r in rows if r["hardware"] == hw and r["status"] == "infeasible"]
        line, = ax.plot([r["n_experts"] for r in ok], [r["coe_latency_ms"] / 1e3 for r in ok],
                        marker="o", ms=3, label=hw)
        if oom and ok:
            ax.plot([min(oom)], [ok[-1]["coe_latency_ms"] / 1e3], marker="x", ms=9,
                    color=line.get_color(), linestyle="none")
            ax.annotate("OOM", (min(oom), ok[-1]["coe_latency_ms"] / 1e3), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("experts")
    ax.set_ylabel("latency per batch (s)")
    ax.set_title("latency vs experts (x: out of memory)", fontsize=10)
    ax.legend(fontsize=8)
    served = [min(r["n_experts"] for r in rows if r["hardware"] == hw and r["status"] != "ok")
              if any(r["hardware"] == hw and r["status"] != "ok" for r in rows) else math.inf
              for hw in platforms]
    cap = max((r["n_experts"] for r in rows if r["status"] == "ok" and r["n_experts"] < min(served)),
              default=None)
    at = [next((r for r in rows if r["hardware"] == hw and r["n_experts"] == cap), None)
          for hw in platforms]
    bottom = [0.0] * len(platforms)
    for part, color in (("routing", "#937860"), ("switching", "#c44e52"), ("execution", "#4c72b0")):
        vals = [r[f"coe_{part}_ms"] / 1e3 if r and r["status"] == "ok" else 0.0 for r in at]
        bx.bar(platforms, vals, bottom=bottom, label=part, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    bx.set_title(f"split at {cap} experts", fontsize=10)
    bx.set_ylabel("s per batch")
    bx.tick_params(axis="x", labelsize=7)
    bx.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: List[str]) -> int:
    """`decodelab coe-plot [SWEEP.yaml] [out=PATH]`: table + plot of latency vs experts."""
    from rich.console import Console
    from rich.table import Table
    from framework.claims import SWEEPS_DIR
    args = [a for a in argv if "=" not in a]
    opts = dict(a.split("=", 1) for a in argv if "=" in a)
    sweep = Path(args[0]) if args else SWEEPS_DIR / DEFAULT_PLOT_SWEEP
    if len(args) > 1 or set(opts) - {"out"} or not sweep.is_file():
        print("error: usage: decodelab coe-plot [SWEEP.yaml] [out=PATH.png] "
              f"(got {' '.join(argv) or 'nothing'}; the sweep must be an existing file)")
        return 2
    rows = sweep_results(sweep)
    t = Table(title=f"CoE latency per batch ({sweep.name})")
    for col in ("hardware", "experts", "status", "latency ms", "routing", "switching", "execution"):
        t.add_column(col, justify="left" if col in ("hardware", "status") else "right")
    for r in rows:
        ok = r["status"] == "ok"
        t.add_row(r["hardware"], str(r["n_experts"]), r["status"],
                  *([f"{r[k]:.0f}" for k in ("coe_latency_ms", "coe_routing_ms", "coe_switching_ms",
                                             "coe_execution_ms")] if ok else ["-"] * 4))
    Console().print(t)
    out = Path(opts.get("out", f"outputs/coe/{sweep.stem}.png"))
    print(f"plot: {plot_latency(rows, out, title=sweep.stem)}")
    return 0
