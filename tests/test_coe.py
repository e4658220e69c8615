"""Composition of Experts (Samba-CoE, claims C10-C12; docs/coe.md): the LRU expert cache on
hand-made access sequences, hand-worked switch times and capacities, the latency split, bad input
and out-of-memory results, and the published figures through `decodelab claims`."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
from decodelab.components import coe as C
from decodelab.components.expert_cache import ExpertCache
from decodelab.errors import ConfigError
from decodelab.modes.dispatch import evaluate

GIB = 2.0**30
LLAMA2_7B_BYTES = 6_738_415_616 * 2  # BF16 weights (conf/model/llama2_7b.yaml source line)


# --- LRU expert cache -------------------------------------------------------------------------


def test_lru_hits_misses_evictions_by_hand():
    c = ExpertCache(2)
    assert [c.access(e) for e in (1, 2, 1)] == [False, False, True]  # miss, miss, hit
    assert not c.access(3) and c.last_evicted == 2  # 1 was used after 2: 2 is the LRU
    assert c.resident() == [1, 3]
    assert not c.access(2) and c.last_evicted == 1
    assert c.access(3) and c.last_evicted is None
    assert c.resident() == [2, 3]
    assert (c.hits, c.misses, c.evictions) == (2, 4, 2)


def test_lru_capacity_one_thrashes_and_repeats_hit():
    c = ExpertCache(1)
    assert [c.access(e) for e in (7, 7, 8, 7, 7)] == [False, True, False, False, True]
    assert (c.hits, c.misses, c.evictions) == (2, 3, 2)


def test_lru_preload_is_placement_not_misses():
    c = ExpertCache(3, resident=[5, 6, 7, 8])  # 5 falls out: more experts than slots
    assert c.resident() == [6, 7, 8] and (c.hits, c.misses, c.evictions) == (0, 0, 0)
    assert c.access(6) and not c.access(9) and c.last_evicted == 7
    assert 9 in c and 7 not in c and len(c) == 3
    with pytest.raises(ValueError):
        ExpertCache(0)


def test_lru_stack_property_more_slots_never_fewer_hits():
    seq = np.random.default_rng(1).integers(0, 40, size=2000)
    hits = []
    for cap in (1, 4, 8, 16, 39):
        c = ExpertCache(cap)
        for e in seq:
            c.access(e)
        hits.append(c.hits)
    assert hits == sorted(hits) and hits[0] < hits[-1]


# --- routing, capacities, switch time ----------------------------------------------------------


def test_routing_distributions():
    assert np.allclose(C.routing_probs("uniform", 4), 0.25)
    z = C.routing_probs("zipf", 3, zipf_s=1.0)
    assert np.allclose(z, np.array([1, 1 / 2, 1 / 3]) / (11 / 6))
    assert np.allclose(C.routing_probs("list", 3, weights=[2, 1, 1]), [0.5, 0.25, 0.25])
    for kind, kw, msg in (
        ("list", {"weights": [1, 2]}, "one per expert"),
        ("list", {"weights": [0, 0, 0]}, "not all 0"),
        ("gauss", {}, "coe.routing='gauss' is not one of"),
    ):
        with pytest.raises(ConfigError, match=msg):
            C.routing_probs(kind, 3, **kw)


def test_hierarchy_by_hand():
    # DGX H100 per GPU: 79.6 GiB HBM, 232.8 GiB host DRAM (2 TB / 8), 8 GB/s copy share (64 / 8).
    tiers = [NS(name="hbm", capacity_gib=79.6), NS(name="host", capacity_gib=232.8)]
    shard = LLAMA2_7B_BYTES / 8  # 1,684,603,904 B of each expert per GPU
    h = C.hierarchy(tiers, 8.0, shard, reserved_hbm_bytes=2.0 * GIB, groups=1)
    assert h["experts_hbm"] == math.floor((79.6 - 2.0) * GIB / shard) == 49
    assert h["experts_backing"] == h["experts_max"] == 148  # 232.8 GiB / 1.5689 GiB = 148.4
    assert h["backing"] == "host"
    # Llama-2-7B BF16 over the paper's 64 GB/s: 13.4768 GB / 64 GB/s = 210.6 ms
    assert h["switch_s"] == pytest.approx(LLAMA2_7B_BYTES / 64e9) == pytest.approx(0.21058, rel=1e-4)
    none = C.hierarchy(tiers[:1], 8.0, shard, 2.0 * GIB, 1)  # no backing tier: HBM only
    assert none["experts_max"] == 49 and none["backing"] == "" and math.isinf(none["switch_s"])


def test_batch_latency_and_simulation():
    lat = C.batch_latency(0.01, 0.05, 0.2, np.array([0.0, 2.0, 8.0]), batch_size=8)
    assert np.allclose(lat["total"], [0.41, 0.81, 2.01])
    p = C.routing_probs("uniform", 100)
    resident = C.simulate(p, 8, 16, slots=8, all_resident=True, seed=0)
    assert not resident["switches"].any() and resident["misses"] == 0
    s = C.simulate(p, 8, 200, slots=8, all_resident=False, seed=0)
    assert s["switches"].max() <= 8 and s["hits"] + s["misses"] == 1600
    # only one expert ever routed and pre-loaded: never a switch
    one = C.simulate(C.routing_probs("list", 3, weights=[0, 1, 0]), 8, 10, 1, False, seed=0)
    assert not one["switches"].any()
    with pytest.raises(ConfigError, match="coe.hbm_cache='fifo'"):
        C.cache_slots("fifo", 8, 49)
    assert C.cache_slots("batch", 8, 49) == 8 and C.cache_slots("lru", 8, 49) == 49
    assert C.cache_slots("batch", 8, 3) == 3


# --- the evaluated design ------------------------------------------------------------------------


def _coe(compose, *ov):
    return evaluate(compose("coe=samba_coe", *ov), keep_steps=False)


@pytest.mark.parametrize("hw,gb_s", [("sn40l_node8", 1000.0), ("dgx_h100", 64.0), ("dgx_a100", 32.0)])
def test_switch_time_hand_worked(compose, hw, gb_s):
    r = _coe(compose, f"hardware={hw}", "coe.n_experts=100")
    m = r["metrics"]
    assert r["status"] == "ok"
    assert m["coe_expert_gib"] == pytest.approx(LLAMA2_7B_BYTES / GIB)  # 12.55 GiB
    assert m["coe_copy_gb_s"] == pytest.approx(gb_s)
    assert m["coe_switch_ms"] == pytest.approx(LLAMA2_7B_BYTES / (gb_s * 1e9) * 1e3)


def test_latency_split_adds_up_and_resident_experts_never_switch(compose):
    m = _coe(compose, "hardware=dgx_h100", "coe.n_experts=100")["metrics"]
    assert m["coe_latency_ms"] == pytest.approx(
        m["coe_routing_ms"] + m["coe_switching_ms"] + m["coe_execution_ms"]
    )
    assert m["coe_execution_ms"] == pytest.approx(8 * m["coe_expert_ms"])
    assert m["coe_expert_ms"] == pytest.approx(m["e2e_ms"])  # the table is one pair's run
    assert m["coe_switching_ms"] == pytest.approx(m["coe_switches_per_batch"] * m["coe_switch_ms"])
    small = _coe(compose, "hardware=dgx_h100", "coe.n_experts=40")["metrics"]
    assert small["coe_spilled"] == 0.0 and small["coe_switching_ms"] == 0.0
    assert small["coe_hit_rate"] == 1.0


def test_lru_and_skewed_routing_switch_less(compose):
    base = ("hardware=dgx_h100", "coe.n_experts=140")
    batch = _coe(compose, *base)["metrics"]["coe_switches_per_batch"]
    lru = _coe(compose, *base, "coe.hbm_cache=lru")["metrics"]["coe_switches_per_batch"]
    zipf = _coe(compose, *base, "coe.hbm_cache=lru", "coe.routing=zipf", "coe.zipf_s=1.2")["metrics"][
        "coe_switches_per_batch"
    ]
    assert zipf < lru < batch <= 8


def test_out_of_memory_and_bad_input_are_results(compose):
    oom = _coe(compose, "hardware=dgx_h100", "coe.n_experts=149")
    assert oom["status"] == "infeasible" and "out of memory: 149 experts" in oom["reason"]
    assert "148 in host" in oom["reason"]
    single = _coe(compose, "hardware=h100_sxm", "coe.n_experts=10")  # no backing tier
    assert single["status"] == "infeasible" and "backing_copy_gb_s" in single["reason"]
    bad = _coe(compose, "coe.routing=zipff", "coe.n_experts=0", "coe.hbm_cache=fifo")
    assert bad["status"] == "invalid"
    assert bad["reason"].splitlines() == [
        "coe.n_experts=0 must be >= 1",
        "coe.routing='zipff' is not one of: uniform, zipf, list",
        "coe.hbm_cache='fifo' is not one of: batch, lru",
    ]
    big = _coe(compose, "model@coe.expert=llama2_70b", "hardware=dgx_h100", "coe.n_experts=10")
    assert big["status"] == "ok" and big["metrics"]["coe_experts_hbm"] < 10


# --- published figures (decodelab claims C10-C12) --------------------------------------------

GAPS = {
    (
        "C12",
        "experts one SN40L Node holds and serves",
    ): "979 = 12 TiB DDR / 13.48 GB; the paper's 850 matches 12 TB / (7B x 2 B) = 857 "
    "(docs/journal/2026-11-23-samba-coe.md, gap 1)",
}


@pytest.fixture(scope="module")
def rows(claim_rows):
    return {(r["id"], r["figure"]): r for r in claim_rows if r["id"] in ("C10", "C11", "C12")}


def test_claim_figures_within_tolerance_except_documented_gaps(rows):
    """Every C10-C12 figure reproduces within its tolerance (or range), except the gaps of
    docs/journal/2026-11-23-samba-coe.md ("6. Gaps"; docs/coe.md, "Limits"), which must still fail
    (a fix, or a regression, is noticed)."""
    assert {cid for cid, _ in rows} == {"C10", "C11", "C12"} and set(GAPS) <= set(rows)
    assert all(r["simulated"] is not None for r in rows.values())
    off = {
        k: f"simulated {r['simulated']:.3g} vs published {r['published']}"
        for k, r in rows.items()
        if not r["pass"]
    }
    assert set(off) == set(GAPS), off


def test_claim_values_pinned(rows):
    """The numbers docs/generated/claims.md reports (a change in the model shows up here first)."""
    sim = {k: r["simulated"] for k, r in rows.items()}
    # 3.63 / 6.43 on the papers' GPU stack (conf/engine/trtllm_2024.yaml: its kernel boundaries calibrated on
    # C1:1); 3.43 / 6.21 with the TensorRT-LLM 1.0 tables' boundaries alone. DGX A100: 6.61 since the A100 is costed
    # from its own measured tables and fitted laws (docs/journal/2026-11-29-a100-l40s-operators.md; was 6.45)
    assert sim[("C10", "Samba-CoE SN40L Node over DGX H100, BS8 20 tokens")] == pytest.approx(3.63, abs=0.05)
    assert sim[("C10", "Samba-CoE SN40L Node over DGX A100, BS8 20 tokens")] == pytest.approx(6.61, abs=0.05)
    assert sim[("C11", "expert switch, DGX H100 over SN40L Node")] == pytest.approx(1000 / 64)
    assert sim[("C11", "expert switch, DGX A100 over SN40L Node")] == pytest.approx(1000 / 32)
    assert sim[("C12", "experts one SN40L Node holds and serves")] == 979
    assert sim[("C12", "DGX H100 experts in HBM (latency jump above)")] == 49
    assert sim[("C12", "DGX H100 experts before out of memory")] == 148
