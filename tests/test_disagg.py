"""Disaggregated prefill/decode serving (framework/modes/serving/disagg.py): the hand-worked KV
transfer, a one-request run worked by hand, the scheduler's Eng.READY path against the pure-Python
reference, invariants and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import NO_FRONTEND, SHORT_UNIFORM_OUTPUTS, compose_cfg, decodelab, the_run_dir
from decodelab.core.build import build
from decodelab.core.reference import reference_step
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving import disagg_pools as DG
from decodelab.modes.serving import metrics as SM
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving import simulate as S
from decodelab.modes.serving.layout import Eng, Req, StepLog
from decodelab.modes.serving.reference import engine_dict, reference_serve, reference_table

REQ_COLS = [Req.ARRIVAL, Req.START, Req.FIRST, Req.DONE, Req.PREEMPT, Req.MAX_ITL]
FIXED = ("workload.prompt_dist.kind=fixed", "workload.output_dist.kind=fixed")
# the hardware's per-step host cost instead of the engine loop's (as tests/test_serving.py)
HW_HOST = ("engine.host_iter_us=null", "engine.host_per_req_us=0", "engine.overlap=false")
HW_HOST += NO_FRONTEND
ONE = ("workload=open_loop", "workload.n_requests=1", "workload.prompt_len=1024", "workload.output_len=8")


def test_kv_transfer_golden():
    """Llama-3.1-8B, bf16 KV, TP1 on both sides: 2 (K and V) x 8 KV heads x 128 x 2 bytes x 32
    layers = 131,072 B per token; a 1024-token prompt is 1024 x 131,072 = 134,217,728 B = 128 MiB.
    Over 50 GB/s (InfiniBand NDR, one NIC per GPU) + 20 us: 134,217,728 / 50e9 = 2.68435 ms,
    + 0.02 = 2.70435 ms. TP2 on both sides: each rank moves its half (4 KV heads) over its own
    NIC in parallel: 1.34218 + 0.02 = 1.36218 ms. TP1 prefill -> TP2 decode: the prefill GPU's one
    NIC carries all 128 MiB: 2.70435 ms again."""
    cfg = compose_cfg("model=llama3_1_8b", "hardware=h100_sxm")
    assert SM.kv_bytes_per_token_chip(build(cfg)) == 2 * 8 * 128 * 2 * 32 == 131072
    bytes_ = 1024 * 131072
    assert bytes_ == 128 * 2**20
    t = DG.transfer_times(np.array([0.0]), np.array([0]), np.array([0]), np.array([bytes_]), 50.0, 20.0)
    assert t[0] * 1e3 == pytest.approx(2.70435456, rel=1e-12)
    for tp_p, tp_d, ms in ((1, 1, 2.70435456), (2, 2, 1.36217728), (1, 2, 2.70435456)):
        c = compose_cfg(
            "workload=open_loop",
            "disagg=ib_1p1d",
            *ONE,
            *FIXED,
            f"disagg.prefill.tensor_parallel={tp_p}",
            f"disagg.decode.tensor_parallel={tp_d}",
        )
        m = evaluate(c)["metrics"]
        assert m["kv_transfer_ms"] == pytest.approx(ms, rel=1e-12)
        assert m["kv_transfer_mib"] == pytest.approx(64.0 if tp_p == tp_d == 2 else 128.0, rel=1e-12)


def test_transfers_share_a_link_first_come_first_served():
    """Two 1 GB transfers into one decode instance at t = 0 over 50 GB/s: the second waits for the
    first (20 ms), then takes 20 ms; on two decode instances from two prefill instances they run
    side by side."""
    one = np.array([0.0, 0.0]), np.array([1e9, 1e9])
    t = DG.transfer_times(one[0], np.array([0, 1]), np.array([0, 0]), one[1], 50.0, 0.0)
    np.testing.assert_allclose(t, [0.02, 0.04], rtol=1e-12)
    t = DG.transfer_times(one[0], np.array([0, 1]), np.array([0, 1]), one[1], 50.0, 0.0)
    np.testing.assert_allclose(t, [0.02, 0.02], rtol=1e-12)


def test_one_request_by_hand():
    """One request, prompt p = 1024, output o = 8, 1P1D on H100 TP1, the hardware's host cost per
    step. Prefill instance: one prefill step of 1024 tokens (run eagerly: CUDA graphs replay
    decode-only steps), t_pre. KV: 2.70435 ms (test_kv_transfer_golden). Decode instance: step 0
    attends the p prompt tokens and emits token 1 (d0), steps 1..o-1 attend p + 1 .. p + o - 1
    and emit tokens 2..o: exactly the aggregated engine's o - 1 decode steps. So
    TTFT = t_pre + 2.70435 ms + d0, prefill_ttft = t_pre, TPOT = aggregated TPOT."""
    ov = (*ONE, *FIXED, *HW_HOST)
    agg = evaluate(compose_cfg(*ov))["metrics"]
    cfg = compose_cfg(*ov, "disagg=ib_1p1d")
    m = evaluate(cfg)["metrics"]
    design = build(cfg)
    eager, _ = S.mixed_design(cfg, design)
    p = 1024.0
    t_pre = sum(reference_step(eager, cfg, p, p, 1.0, prefill=True).values()) * 1e3
    d0 = sum(reference_step(design, cfg, 1.0, p, 1.0).values()) * 1e3
    assert m["prefill_ttft_ms"] == pytest.approx(t_pre, rel=1e-9)
    assert m["prefill_ttft_ms"] == pytest.approx(agg["ttft_ms"], rel=1e-12)  # same prefill step
    assert m["ttft_ms"] == pytest.approx(t_pre + 2.70435456 + d0, rel=1e-9)
    assert m["tpot_ms"] == pytest.approx(agg["tpot_ms"], rel=1e-12)
    assert m["n_chips"] == 2 and m["tok_s_per_chip"] == pytest.approx(m["tok_s_system"] / 2)


READY_CASES = {
    "queue": (
        "workload.arrival_rate=150",
        "engine.kv_mem_fraction=0.002",
        "engine.max_batch=3",
    ),
    "preempt": (
        "workload.arrival_rate=300",
        "engine.chunk_size=64",
        "engine.on_kv_full=preempt",
        "engine.kv_mem_fraction=0.0015",
        "engine.kv_block_tokens=16",
        "workload.output_dist.low=40",
        "workload.output_dist.high=120",
    ),
    "separate_steps_buckets": (
        "workload.arrival_rate=80",
        "engine.mixed_steps=false",
        "engine.batch_buckets=[1,2,4,8]",
    ),
}


@pytest.mark.parametrize("case", list(READY_CASES))
def test_ready_arrivals_match_reference(case):
    """Requests arriving with their KV in the cache (Eng.READY: a decode pool): the Numba scheduler
    and the pure-Python reference give the same per-request times, incl. KV-bound waiting,
    preemption (a preempted request recomputes) and separate steps with batch buckets."""
    cfg = compose_cfg(
        "workload=open_loop",
        "workload.n_requests=14",
        *SHORT_UNIFORM_OUTPUTS,
        *READY_CASES[case],
    )
    design = build(cfg)
    p = S.prepare(cfg, design)
    p["eng"][Eng.READY] = 1.0
    req, steps, status = SK.serve(*p["kernel_args"])
    assert status == 0 and (steps[:, StepLog.PREFILL] == 0).all() == (case != "preempt")
    ref = reference_serve(
        design,
        cfg,
        p["mixed"],
        engine_dict(p["eng"], p["buckets"]),
        p["arrival"],
        p["prompt"],
        p["output"],
        p["think"],
    )
    np.testing.assert_allclose(req[:, REQ_COLS], reference_table(ref), rtol=1e-9, atol=1e-12)
    if case == "preempt":
        assert req[:, Req.PREEMPT].sum() > 0
    else:
        assert (req[:, Req.START] > req[:, Req.ARRIVAL]).any()  # KV or slots made some wait


def test_disagg_none_is_todays_serving():
    """disagg=none (the default) leaves every serving number as it was: the same metrics as the
    serving mode called directly."""
    ov = ("workload=open_loop", "workload.n_requests=40")
    cfg = compose_cfg(*ov)
    assert cfg.disagg.enabled is False and cfg.disagg.name == "none"
    assert evaluate(compose_cfg(*ov, "disagg=none"))["metrics"] == S.evaluate_serving(cfg, build(cfg)).metrics


def test_more_decode_instances_never_raise_tpot():
    """Under a load that keeps one decode instance busy, a second decode instance (round robin)
    halves each instance's batch: mean TPOT falls, TTFT does not rise; a second prefill instance
    lowers the prefill queue. Chips count both pools."""
    ov = ("workload=open_loop", "disagg=ib_1p1d", "workload.n_requests=60", "workload.arrival_rate=8")
    m11 = evaluate(compose_cfg(*ov))["metrics"]
    m12 = evaluate(compose_cfg(*ov, "disagg.decode.instances=2"))["metrics"]
    m21 = evaluate(compose_cfg(*ov, "disagg.prefill.instances=2"))["metrics"]
    assert m12["tpot_ms"] < m11["tpot_ms"] and m12["ttft_ms"] <= m11["ttft_ms"]
    assert m12["decode_batch_mean"] < m11["decode_batch_mean"]
    assert m21["prefill_ttft_ms"] <= m11["prefill_ttft_ms"]
    assert (m11["n_chips"], m12["n_chips"], m21["n_chips"]) == (2, 3, 3)


@pytest.mark.parametrize(
    "override, status, words",
    [
        ("disagg.decode.instances=0", "invalid", "disagg.decode.instances=0 must be >= 1"),
        ("disagg.prefill.tensor_parallel=0", "invalid", "disagg.prefill.tensor_parallel=0"),
        ("disagg.routing=random", "invalid", "round_robin"),
        ("disagg.kv_link.bw_gb_s=0", "invalid", "disagg.kv_link.bw_gb_s=0 must be > 0"),
        ("workload=decode", "invalid", "open_loop and closed_loop"),
        ("disagg.decode.attention_dp=0", "invalid", "disagg.decode.attention_dp=0 must be >= 1"),
        ("+disagg.decode.engine.nope=1", "invalid", "disagg.decode.engine.nope is not an engine field"),
        ("model=llama3_1_70b", "infeasible", "prefill pool (h100_sxm, tp1)"),
        ("disagg.decode.tensor_parallel=3", "infeasible", "decode pool (h100_sxm, tp3)"),
    ],
)
def test_bad_disagg_input_is_one_line(override, status, words):
    res = evaluate(compose_cfg("workload=open_loop", "disagg=ib_1p1d", "workload.n_requests=4", override))
    assert res["status"] == status and words in res["reason"] and "\n" not in res["reason"], res["reason"]


def test_pool_hardware_from_the_hardware_group():
    """A pool takes another chip from the hardware group; the other pool keeps the run's."""
    cfg = compose_cfg(
        "workload=open_loop",
        "disagg=ib_1p1d",
        "workload.n_requests=8",
        "+hardware@disagg.decode.hardware=h200_sxm",
    )
    res = evaluate(cfg)
    assert res["status"] == "ok" and "1 x decode h200_sxm tp1" in " ".join(res["notes"])
    assert "1 x prefill h100_sxm tp1" in " ".join(res["notes"])


def test_energy_of_both_pools_between_idle_and_tdp():
    """Energy per token counts every chip of both pools for the makespan: between all chips idle
    (idle_w) and all at TDP (tdp_w); a price gives cost per million tokens the same way."""
    ov = ("workload=open_loop", "disagg=ib_1p1d", "workload.n_requests=30", "hardware.price_per_chip_hour=2")
    cfg = compose_cfg(*ov)
    m = evaluate(cfg)["metrics"]
    hw, chip_s = cfg.hardware, 2 * m["makespan_s"]
    tokens = m["tok_s_system"] * m["makespan_s"]
    assert hw.idle_w * chip_s / tokens < m["energy_j_per_token"] < hw.tdp_w * chip_s / tokens
    assert m["cost_per_mtok"] == pytest.approx(2 * chip_s / 3600 / tokens * 1e6, rel=1e-12)


@pytest.mark.slow
def test_cli_run_and_bad_field(tmp_path):
    """`decodelab workload=open_loop disagg=ib_1p1d`: the per-pool table and requests.csv; a bad
    pool field: exit 2 with one `error:` line naming it."""
    ok = decodelab(tmp_path, "workload=open_loop", "disagg=ib_1p1d", "workload.n_requests=20", "tracking=off")
    assert ok.rc == 0, ok.explain()
    assert "prefill end (ms)" in ok.text and "KV transfer mean / p90" in ok.text
    assert (the_run_dir(tmp_path) / "requests.csv").is_file()
    bad = decodelab(
        tmp_path, "workload=open_loop", "disagg=ib_1p1d", "disagg.decode.instances=0", "tracking=off"
    )
    errors = [ln for ln in bad.err.splitlines() if ln.startswith("error: ")]
    assert bad.rc == 2 and len(errors) == 1 and "disagg.decode.instances=0" in errors[0], bad.explain()


def test_closed_loop_one_client_by_hand():
    """One closed-loop client, 3 requests, 1P1D: nothing overlaps, so every request is the
    open-loop single request of test_one_request_by_hand (prefill, KV transfer, o decode steps)
    one after another: the same TTFT and TPOT, a makespan of 3 end-to-end times, and the
    prefill delays converge (a note says in how many rounds)."""
    base = (*FIXED, *HW_HOST, "workload.prompt_len=1024", "workload.output_len=8", "disagg=ib_1p1d")
    one = evaluate(compose_cfg(*base, "workload=open_loop", "workload.n_requests=1"))["metrics"]
    res = evaluate(
        compose_cfg(*base, "workload=closed_loop", "workload.concurrency=1", "workload.n_requests=3")
    )
    m = res["metrics"]
    assert res["status"] == "ok" and m["n_requests"] == 3
    for k in ("ttft_ms", "tpot_ms", "prefill_ttft_ms", "kv_transfer_ms", "e2e_ms"):
        assert m[k] == pytest.approx(one[k], rel=1e-9), k
    assert m["makespan_s"] == pytest.approx(3 * one["e2e_ms"] / 1e3, rel=1e-6)
    assert any("converged in" in n for n in res["notes"]) and m["disagg_rounds"] <= 5


# closed-loop clients on decode instances of 2 attention groups of 2 chips (Qwen3-30B-A3B, 2k + 32 tokens)
ADP_DECODE = (
    *FIXED,
    "workload=closed_loop",
    "workload.prompt_len=2048",
    "workload.output_len=32",
    "disagg=ib_1p1d",
    "model=qwen3_30b_a3b",
    "disagg.decode.tensor_parallel=2",
    "disagg.decode.attention_dp=2",
)


def test_closed_loop_decode_ranks_and_prefill_copies():
    """A closed loop of 16 clients on 2 decode instances of 2 attention groups: one decode rank
    of 4 ranks alike is simulated with its 4 clients, and the prefill pool sees 4 copies of its
    requests: the run counts 4 x its requests and tokens, and a rank never holds more than its
    clients. A second prefill instance shortens the prefill delay and never raises TTFT."""
    ov = (*ADP_DECODE, "workload.concurrency=16", "disagg.decode.instances=2")
    res = evaluate(compose_cfg(*ov))
    m = res["metrics"]
    assert res["status"] == "ok", res["reason"]
    assert m["n_requests"] == 160 and m["decode_batch_max"] <= 4
    assert m["n_chips"] == 1 + 4 and m["decode_chips"] == 4
    assert "the decode ranks the clients fill (4 with 4 clients)" in " ".join(res["notes"])
    m2 = evaluate(compose_cfg(*ov, "disagg.prefill.instances=2"))["metrics"]
    assert m2["prefill_ttft_ms"] < m["prefill_ttft_ms"] and m2["ttft_ms"] <= m["ttft_ms"]


def test_closed_loop_fixed_point_stops_on_convergence_or_a_two_round_cycle(monkeypatch):
    """settle() ends when no delay moves more than 1 us, or when the delays repeat those of two
    rounds before (two requests taking a NIC in turn flip every round), and says which."""
    from decodelab.modes.serving import disagg_closed as DC

    def flipping(cfg, pools, kinds, delays, ranks):
        return {"delay": np.array([0.5, 0.2 if delays[0][1] == 0.1 else 0.1, 0.3])}

    monkeypatch.setattr(DC, "one_round", flipping)
    kinds = [((np.zeros(3), np.ones(3), np.ones(3)), 1, 1)]
    _, rounds, how = DC.settle(None, None, kinds, None)
    assert rounds == 3 and how.startswith("settled in 3 rounds into a two-round cycle of 1 of 3 requests")
    monkeypatch.setattr(DC, "one_round", lambda cfg, pools, kinds, delays, ranks: {"delay": np.full(3, 0.25)})
    _, rounds, how = DC.settle(None, None, kinds, None)
    assert (rounds, how) == (2, "converged in 2 rounds")


@pytest.mark.parametrize(
    "clients, ranks, kinds",
    [
        (4, 7, [(1, 4)]),
        (16, 4, [(4, 4)]),
        (128, 7, [(18, 5), (19, 2)]),
        (10, 7, [(1, 4), (2, 3)]),
        (9, 7, [(1, 5), (2, 2)]),
        (13, 11, [(1, 9), (2, 2)]),
        (1, 16, [(1, 1)]),
        (20, 7, [(2, 1), (3, 6)]),
    ],
)
def test_the_clients_spread_evenly_over_the_decode_ranks(clients, ranks, kinds):
    """C clients on R decode ranks: floor(C / R) on every rank and one more on C mod R of them (by
    hand: 128 = 7 x 18 + 2, 20 = 7 x 2 + 6); fewer clients than ranks: one each on C ranks."""
    from decodelab.modes.serving.disagg_closed import rank_types

    assert rank_types(clients, ranks) == kinds
    assert sum(k * n for k, n in kinds) == clients


@pytest.mark.parametrize(
    "clients, ranks, cap, shares",
    [
        (3, 2, 0, [10.0, 20.0]),  # no cap: 10 a client
        (3, 2, 1, [15.0, 15.0]),  # one at a time on either rank: the 30 split evenly
        (13, 11, 1, [130 / 11, 130 / 11]),
        (10, 7, 0, [10.0, 20.0]),
        (16, 4, 0, [40.0]),
    ],
)
def test_a_rank_serves_the_requests_it_has_slots_for(clients, ranks, cap, shares):
    """The 10 C measured requests are dealt to the ranks in proportion to what each runs at once, its
    clients or the batch cap where fewer (by hand: 3 clients on 2 ranks of one slot each serve 15
    and 15, without the cap 10 and 20; 13 on 11 with one slot each, 130 / 11 a rank)."""
    from decodelab.modes.serving.disagg_closed import rank_requests, rank_types

    w = compose_cfg("workload=closed_loop", f"workload.concurrency={clients}").workload
    got = rank_requests(w, rank_types(clients, ranks), cap)
    assert got == pytest.approx(shares, rel=1e-12)
    assert sum(m * n for m, (_, n) in zip(got, rank_types(clients, ranks))) == pytest.approx(10 * clients)


@pytest.mark.parametrize("cap", ["disagg.decode.max_batch=1", "engine.max_batch=1"])
def test_a_capped_decode_pool_shares_its_slots(cap):
    """3 clients on 2 decode ranks that run one request each (disagg.decode.max_batch=1): one rank
    serves one client, the other two, 15 of the 30 requests each. On the second a request holds the
    slot for its decode, D = 32 steps (31 TPOT intervals and the step before its first token), and
    the other client's next request, ready P = prefill TTFT + KV transfer after it was sent, waits
    D - P for it: the first waits ~D, 13 more D - P, none on the first rank, so the mean decode queue
    is ~(D + 13 (D - P)) / 30 (10%: the steps' boundaries); a rank never holds more than one. The
    engine's own cap (engine.max_batch, every pool's) deals the requests so too."""
    ov = (*ADP_DECODE, "workload.concurrency=3", "disagg.decode.attention_dp=1", "disagg.decode.instances=2")
    res = evaluate(compose_cfg(*ov, cap))
    m = res["metrics"]
    assert res["status"] == "ok", res["reason"]
    assert m["n_requests"] == 30 and m["decode_batch_max"] == 1
    assert "(1 with 1 client, 1 with 2 clients)" in " ".join(res["notes"])
    d, p = 32 * m["tpot_ms"], m["prefill_ttft_ms"] + m["kv_transfer_ms"]
    assert m["decode_queue_ms"] == pytest.approx((d + 13 * (d - p)) / 30, rel=0.1)


def test_few_clients_on_many_decode_ranks():
    """4 clients on 4 decode instances of 2 attention groups (8 ranks): 4 ranks busy, each with one
    client and a quarter of the 40 requests (the run counts 4 x the simulated rank's), and a note says so."""
    ov = (*ADP_DECODE, "workload.concurrency=4", "disagg.decode.instances=4")
    res = evaluate(compose_cfg(*ov))
    m = res["metrics"]
    assert res["status"] == "ok", res["reason"]
    assert m["n_requests"] == 40 and m["decode_batch_max"] <= 1  # 10 x 4 clients: 10 a busy rank
    assert "4 clients fill 4 of the 8 decode ranks" in " ".join(res["notes"])
