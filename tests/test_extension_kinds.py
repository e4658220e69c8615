"""Each kind of extension that docs/architecture.md ("Where each kind of extension goes") lists is
backed here by a toy one, added without editing the repository:

- the YAML-only kinds (chip, model, engine, optimization set, claim) as files in a config
  directory of the test's own (`decodelab.evaluate(..., config_dir=...)`, a user claim sweep run
  by the claims runner), each with a consequence worked out by hand;
- the code kinds (KV policy, engine behaviour, operator-cost source, metric, run mode) by putting
  a toy into the registry, module or branch the doc's row names (monkeypatch, undone after the
  test), and asserting that `decodelab.evaluate` uses it.

Every test first reads its kind's row of the table and checks that the files it writes or the
modules it patches are the ones the row names: the doc says where an extension goes, the test
shows that place is enough."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path

import decodelab
import numpy as np
import pytest
from decodelab.components import kv_policy as kvp
from decodelab.components.placement import GIB
from decodelab.core import metrics as core_metrics
from decodelab.kernel_layout import Law, Lin
from decodelab.modes import single
from decodelab.modes.serving import engine_vector, simulate
from decodelab.modes.serving.layout import Eng
from decodelab.opcost import registry
from decodelab.opcost.base import Price

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
KINDS = (
    "chip",
    "model",
    "KV policy",
    "serving engine",
    "engine behaviour",
    "operator-cost source",
    "optimization set",
    "metric",
    "run mode",
    "claim",
)
BASE = ("tracking=off", "model=llama3_1_8b", "hardware=h100_sxm")
# Llama-3.1-8B's KV bytes per token: 2 (K, V) x 32 layers x 8 KV heads x 128 head_dim x 2 B
KV_TOKEN_8B = 131_072


def extension_table() -> dict:
    """{`you add` cell: `where` cell} of the table under "Where each kind of extension goes"."""
    text = DOC.read_text()
    section = text.split("## Where each kind of extension goes", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and not set(cells[0]) <= set("-: "):
            rows[cells[0]] = cells[1]
    rows.pop("you add", None)
    return rows


def row(kind: str) -> str:
    """The `where` cell of the one row whose `you add` cell is "a(n) <kind>", alone or followed by
    "or ..." or "(...)" ("a model", not "a model architecture")."""
    pattern = re.compile(rf"an? {re.escape(kind)}(?: or .*| \(.*)?")
    found = [where for what, where in extension_table().items() if pattern.fullmatch(what)]
    assert len(found) == 1, f"docs/architecture.md: {len(found)} rows for {kind!r}"
    return found[0]


def names(kind: str, *paths: str) -> None:
    where = row(kind)
    for p in paths:
        assert p in where, f"docs/architecture.md's row for {kind!r} does not name {p}: {where}"


def write(directory: Path, rel: str, text: str) -> Path:
    path = directory / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_the_table_lists_every_kind_of_the_issue():
    rows = extension_table()
    for kind in KINDS:
        assert row(kind)
    assert len(rows) >= len(KINDS)


# ---- YAML only: a config directory of the test's own ---------------------------------------------


def test_chip_a_hardware_yaml_with_twice_the_bandwidth_halves_the_memory_time(tmp_path):
    names("chip", "conf/hardware/<name>.yaml")
    write(
        tmp_path,
        "hardware/toy_fast.yaml",
        """\
        # a toy chip: the H100 SXM with twice its HBM bandwidth (3350 -> 6700 GB/s)
        defaults:
          - h100_sxm
          - _self_
        name: toy_fast
        memory:
          hbm:
            bandwidth_gb_s: 6700
        """,
    )
    roof = ("hardware.op_model=roofline", "workload.batch_size=1")
    base = decodelab.evaluate(*BASE, *roof)
    fast = decodelab.evaluate(*BASE, "hardware=toy_fast", *roof, config_dir=str(tmp_path))
    assert base.status == fast.status == "ok"
    # the same bytes at twice the rate (the efficiency curve depends on the bytes, not the rate)
    assert fast.metrics["tpot_memory_ms"] == pytest.approx(base.metrics["tpot_memory_ms"] / 2, rel=1e-9)
    assert fast.metrics["roofline_tok_s"] == pytest.approx(2 * base.metrics["roofline_tok_s"], rel=1e-9)


def test_model_a_model_yaml_has_the_hand_counted_parameters(tmp_path):
    names("model", "conf/model/<name>.yaml")
    write(
        tmp_path,
        "model/toy_lm.yaml",
        """\
        # a toy dense model: 2 layers, d 64, 4 query heads and 2 KV heads of 16, SwiGLU 128, vocab 1000
        name: toy_lm
        arch: dense
        n_layers: 2
        d_model: 64
        n_heads: 4
        n_kv_heads: 2
        head_dim: 16
        ffn_dim: 128
        vocab_size: 1000
        ffn_act: swiglu
        tied_embeddings: false
        max_context: 4096
        source: "a toy of tests/test_extension_kinds.py"
        """,
    )
    from decodelab.components.models import dense
    from decodelab.config.composition import design_config

    cfg = design_config((*BASE, "model=toy_lm"), str(tmp_path))
    # per layer: q 64x64 + k, v 64x32 each + o 64x64 = 12,288; SwiGLU 3 x 64 x 128 = 24,576;
    # 2 norms of 64 = 128 -> 36,992. Embedding and LM head 1000 x 64 each; final norm 64.
    params = 2 * 36_992 + 2 * 64_000 + 64
    assert params == 202_048
    assert dense.param_counts(cfg.model)["total"] == params
    work = ("workload.prompt_len=1000", "workload.output_len=24")
    r = decodelab.evaluate(*BASE, "model=toy_lm", *work, config_dir=str(tmp_path))
    assert r.status == "ok", r.reason
    # a full-cache slot of 1000 + 24 tokens x 256 B (2 x 2 layers x 2 KV heads x 16 x 2 B)
    assert r.metrics["kv_slot_gib_per_chip"] * GIB == pytest.approx(1024 * 256, rel=1e-12)


def test_serving_engine_an_engine_yaml_caps_the_batch(tmp_path):
    names("serving engine", "conf/engine/<name>.yaml")
    write(
        tmp_path,
        "engine/toy_engine.yaml",
        """\
        # a toy engine: the default one with at most 4 sequences in flight
        defaults:
          - default
          - _self_
        name: toy_engine
        max_batch: 4
        """,
    )
    load = ("workload=closed_loop", "workload.concurrency=8", "workload.n_requests=8")
    load += ("workload.prompt_len=128", "workload.output_len=16")
    wide = decodelab.evaluate(*BASE, *load)
    toy = decodelab.evaluate(*BASE, *load, "engine=toy_engine", config_dir=str(tmp_path))
    assert wide.status == toy.status == "ok"
    # 8 requests of 16 tokens: one wave of 16 steps with 8 in flight; with the toy engine two
    # waves of 4 (the first token comes with the prefill step), 32 steps
    assert (wide.metrics["batch_max"], wide.metrics["n_steps"]) == (8, 16)
    assert (toy.metrics["batch_max"], toy.metrics["n_steps"]) == (4, 32)


def test_optimization_set_schedule_offloading_divides_the_host_time(tmp_path):
    names("optimization set", "conf/optimizations/<name>.yaml")
    write(
        tmp_path,
        "optimizations/toy_offload4.yaml",
        """\
        # a toy set: everything of `all`, with 4 decode steps per host round trip
        defaults:
          - all
          - _self_
        name: toy_offload4
        schedule_offloading: 4
        """,
    )
    run = ("tracking=off", "model=llama3_1_8b", "hardware=sn40l_socket")
    base = decodelab.evaluate(*run, "optimizations=all", "optimizations.schedule_offloading=1")
    toy = decodelab.evaluate(*run, "optimizations=toy_offload4", config_dir=str(tmp_path))
    assert base.status == toy.status == "ok"
    # sn40l_socket's host_step_us 100 per round trip: 0.1 ms per token, 0.025 ms over 4 steps
    assert base.metrics["tpot_host_ms"] == pytest.approx(0.1, rel=1e-9)
    assert toy.metrics["tpot_host_ms"] == pytest.approx(0.025, rel=1e-9)
    assert base.metrics["tpot_ms"] - toy.metrics["tpot_ms"] == pytest.approx(0.075, rel=1e-6)


def test_claim_a_user_sweep_with_a_claim_block_is_judged(tmp_path):
    names("claim", "sweeps/", "claim:")
    from decodelab.runs.claims import run_claims

    path = write(
        tmp_path,
        "toy_claim.yaml",
        """\
        # a toy claim: doubling the HBM bandwidth halves the memory part of a roofline TPOT
        defaults:
          - config
          - _self_
        claim:
          id: T1
          source: tests/test_extension_kinds.py
          figures:
            - name: memory time at 6700 over 3350 GB/s
              metric: tpot_memory_ms
              ratio: {key: hardware.memory.hbm.bandwidth_gb_s, num: 6700, den: 3350}
              published: 0.5
        hydra:
          sweeper:
            params:
              model: llama3_1_8b
              hardware: h100_sxm
              hardware.op_model: roofline
              hardware.memory.hbm.bandwidth_gb_s: 3350,6700
              workload.output_len: 8
        """,
    )
    (r,) = run_claims(files=[path])
    assert (r["id"], r["user"], r["pass"]) == ("T1", True, True)
    assert r["simulated"] == pytest.approx(0.5, rel=1e-9)


# ---- code: the toy registered where the doc's row says ------------------------------------------


def test_kv_policy_a_module_in_KV_POLICIES_and_its_yaml(tmp_path, monkeypatch):
    names("KV policy", "components/kv_policy/<name>.py", "conf/kv_policy/<name>.yaml", "KV_POLICIES")
    names("KV policy", "components/kv_policy/__init__.py")
    module = write(
        tmp_path,
        "toy_recent.py",
        '''\
        """A toy policy: keep the last `budget` tokens (a constant slot of `budget` tokens)."""


        def check(pol, model):
            return [] if pol.budget >= 1 else [f"kv_policy.budget={pol.budget} must be >= 1"]


        def cached_tokens(pol, prompt_len, generated, model=None):
            return float(min(prompt_len + generated, pol.budget))


        def kernel_params(pol, model=None):
            return {"prompt_cap": 0.0, "total_cap": float(pol.budget), "read_cap": 0.0}


        def slot_layout(pol):
            return "static"


        def slot_capacity(pol, model=None):
            return float(pol.budget)
        ''',
    )
    spec = importlib.util.spec_from_file_location("toy_recent", module)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    monkeypatch.setitem(kvp.KV_POLICIES, "toy_recent", kvp.Policy(toy))
    write(tmp_path / "conf", "kv_policy/toy_recent.yaml", "name: toy_recent\nbudget: 64\n")
    r = decodelab.evaluate(*BASE, "kv_policy=toy_recent", config_dir=str(tmp_path / "conf"))
    assert r.status == "ok", r.reason
    # a slot of 64 tokens x 131,072 B
    assert r.metrics["kv_slot_gib_per_chip"] * GIB == pytest.approx(64 * KV_TOKEN_8B, rel=1e-12)
    bad = decodelab.evaluate(
        *BASE, "kv_policy=toy_recent", "kv_policy.budget=0", config_dir=str(tmp_path / "conf")
    )
    assert bad.status == "invalid" and "kv_policy.budget=0 must be >= 1" in bad.reason


def test_engine_behaviour_reaches_the_scheduler_through_engine_inputs(monkeypatch):
    """A rule inside the jitted scheduler cannot be patched into a running test; this toy rule (a
    fixed host pause of 1 ms per step, beside the engine's own host work) goes through the part
    of the row a test can replace, `engine_inputs` filling the engine vector of layout.py, and
    the scheduler applies it to every step."""
    names(
        "engine behaviour",
        "core/schema_engine.py",
        "modes/serving/engine_vector.py",
        "modes/serving/layout.py",
    )
    names("engine behaviour", "modes/serving/scheduler.py", "modes/serving/reference.py")
    pause_s = 1e-3
    engine_inputs = engine_vector.engine_inputs

    def toy_engine_inputs(cfg, design, prompt, output, ready=False):
        eng, buckets, notes = engine_inputs(cfg, design, prompt, output, ready)
        eng[Eng.HOST_ITER] += pause_s
        return eng, buckets, notes + ["toy: a 1 ms host pause per step"]

    one = ("engine=vllm", "workload=closed_loop", "workload.concurrency=1", "workload.n_requests=1")
    one += ("workload.prompt_len=1000", "workload.output_len=8")
    base = decodelab.evaluate(*BASE, *one)
    monkeypatch.setattr(simulate, "engine_inputs", toy_engine_inputs)  # where prepare calls it
    toy = decodelab.evaluate(*BASE, *one)
    assert base.status == toy.status == "ok"
    assert "toy: a 1 ms host pause per step" in toy.notes
    # vLLM runs without an overlap scheduler: each of the 7 decode steps is 1 ms longer
    assert toy.metrics["tpot_ms"] - base.metrics["tpot_ms"] == pytest.approx(1.0, rel=1e-6)
    assert toy.metrics["ttft_ms"] - base.metrics["ttft_ms"] == pytest.approx(1.0, rel=1e-6)


def _toy_family(t0_s: float):
    """An operator family that costs every RMSNorm op (no microbenchmark law covers them) at a
    fixed t0 under the GEMM law with zero rates: t = pnorm_1(0, 0) + t0 = t0."""

    class Toy:
        NAME = "toy_norm"
        FIT_GROUPS = ()

        @staticmethod
        def matches(op):
            return op.name.endswith("_norm")

        @staticmethod
        def price(op, ctx):
            return Price("toy_norm", Law.GEMM, cols={Lin.T0: t0_s, Lin.G_P: 1.0}, whole=True)

        @staticmethod
        def reference(op, ctx, p, step):
            return 0.0, t0_s, 0.0

        @staticmethod
        def missed(op, ctx, priced):
            return None

        @staticmethod
        def check(hw):
            return []

    return Toy


def test_operator_cost_source_a_family_in_registry_FAMILIES(monkeypatch):
    names("operator-cost source", "framework/opcost/<family>.py", "registry.FAMILIES")
    names("operator-cost source", "framework/opcost/README.md")
    tpot = {}
    for t0_us in (1.0, 3.0):
        toy = _toy_family(t0_us * 1e-6)
        monkeypatch.setattr(registry, "FAMILIES", (toy,) + registry.FAMILIES)
        monkeypatch.setitem(registry.BY_NAME, toy.NAME, toy)
        r = decodelab.evaluate(*BASE, "hardware.op_model=fitted", "workload.batch_size=1")
        assert r.status == "ok", r.reason
        tpot[t0_us] = r.metrics["tpot_ms"]
        monkeypatch.undo()
    # 65 RMSNorms per token (input and residual norms of 32 layers, the final norm), each alone in
    # its kernel call under a law: 2 us more each is 130 us per token
    assert tpot[3.0] - tpot[1.0] == pytest.approx(65 * 2e-3, rel=1e-6)


def test_metric_a_line_in_core_metrics_reaches_the_result_and_its_record(monkeypatch):
    names("metric", "core/metrics.py")
    rate_metrics = core_metrics.rate_metrics

    def with_toy(design, w, ttft, tpot, *args):
        res = rate_metrics(design, w, ttft, tpot, *args)
        res["toy_tpot_us"] = tpot * 1e6
        return res

    monkeypatch.setattr(core_metrics, "rate_metrics", with_toy)
    r = decodelab.evaluate(*BASE)
    assert r.status == "ok", r.reason
    assert r.metrics["toy_tpot_us"] == pytest.approx(1e3 * r.metrics["tpot_ms"], rel=1e-12)
    assert r.record({})["metrics"]["toy_tpot_us"] == r.metrics["toy_tpot_us"]  # result.json


def test_run_mode_a_module_returning_a_result_and_one_branch_in_single(monkeypatch):
    names("run mode", "framework/modes/<mode>.py", "modes/single.py", "Result")
    from decodelab.core.result import Result

    def toy_mode(cfg, design, keep_steps=True):
        """A toy mode: the memory-bound TPOT, every streamed weight byte read once per step."""
        return Result("ok", metrics={"toy_tpot_ms": 1e3 * design.weight_bytes_streamed / design.hbm_bw_total})

    monkeypatch.setattr(single, "evaluate_static", toy_mode)  # the static branch's mode
    r = decodelab.evaluate(*BASE)
    assert r.status == "ok" and set(r.metrics) == {"toy_tpot_ms"}
    # Llama-3.1-8B's BF16 weights without the embedding table: 2 x 7,504,924,672 B at 3.35 TB/s
    assert r.metrics["toy_tpot_ms"] == pytest.approx(1e3 * 2 * 7_504_924_672 / 3.35e12, rel=1e-12)
    assert np.isclose(r.metrics["toy_tpot_ms"], 4.48055, rtol=1e-5)
