"""Closed-loop clients on a disaggregated deployment (workload=closed_loop with disagg.enabled;
framework/modes/serving/disagg.py runs the open loop).

`concurrency` clients each send a request, wait for its last token from the decode pool and send
the next one (the benchmark client of docs/validation.md, "How a row runs"). The decode pool has
R = instances x attention groups ranks and the clients are spread evenly over them, as the one-pool
serving mode spreads them over its attention groups: the simulation runs one decode rank (its
ceil(C / R) clients, their requests, its scheduler with Eng.READY and a closed loop), which stands for the
A = C / ceil(C / R) ranks the clients fill (rounded; A = R when C is a multiple of R, 4 of 7 at C = 4),
and the prefill pool sees A copies of that rank's requests (a cohort: the j-th request of every
decode rank is sent at the same time; round robin in sending order over the prefill pool's
P x groups ranks; each rank first come first served, one scheduler each). A request's prefill
delay d (send -> its KV is in the decode rank: prefill queue, prefill, the KV transfer of
disagg_pools.transfer_times, FIFO on each NIC) is the mean of its cohort's, which the decode rank
sees as the client's delay before the request arrives (the scheduler's per-request think time).

The two pools are coupled (the decode rank's completions are the prefill pool's arrivals, the
prefill pool's delays the decode rank's arrivals), so the delays are the fixed point of: decode
rank with delays d -> send times -> prefill pool and transfers -> delays d'. Starting from d = 0
it is iterated until no delay moves more than TOL_S, or the delays repeat those of two rounds
before (a few requests whose order flips each round, e.g. two transfers of equal prefill end taking
a NIC in turn), or MAX_ROUNDS (said in a note). A decode rank takes its requests in the order its
clients sent them (the scheduler admits arrivals in index order: with equal prompts the prefill
pool ends them in sending order too)."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from decodelab.modes.resolve import with_fields
from decodelab.modes.serving import frontend
from decodelab.modes.serving.disagg_pools import (
    groups,
    kept_tokens,
    pool_design,
    run_instance,
    run_ranks,
    transfer_times,
)
from decodelab.modes.serving.metrics import kv_bytes_per_token_chip
from decodelab.modes.serving.workload import group_workload, requests
from decodelab.modes.serving.layout import Req

TOL_S = 1e-6  # a delay that moves less than 1 us between two rounds has converged
MAX_ROUNDS = 40


def _ceil(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def prefill_cohorts(pre, send, prompt, copies: int, ranks: int):
    """The prefill pool over `copies` copies of each request (sent at `send`): per copy its
    request j, decode rank r, prefill rank q and scheduler row; each prefill rank's steps."""
    n = len(send)
    order = np.argsort(send, kind="stable")
    j_of = np.repeat(order, copies)
    r_of = np.tile(np.arange(copies), n)
    q_of = np.arange(n * copies) % ranks  # round robin in sending order
    rows, steps = run_ranks(pre, q_of, send[j_of], prompt[j_of], np.ones(n * copies), False, "prefill")
    return rows, steps, j_of, r_of, q_of


def cohort_mean(values: np.ndarray, j_of: np.ndarray, n: int, copies: int) -> np.ndarray:
    return np.bincount(j_of, weights=values, minlength=n) / copies


def one_round(cfg, pools, reqs, delay: np.ndarray, units) -> Dict[str, object]:
    """The decode rank with the requests' delays `delay`, then the prefill pool and the transfers
    of its cohorts: the new delays and everything the metrics read."""
    (pre, dec), (arrival0, prompt, output), (copies, ranks) = pools, reqs, units
    first = np.where(np.isnan(arrival0), np.nan, arrival0 + delay)
    think = delay + cfg.workload.think_ms * 1e-3
    d_req, d_steps = run_instance(*dec, first, prompt, output, True, "decode", think=think)
    send = d_req[:, Req.ARRIVAL] - delay
    at_pool = send + frontend.delays(cfg.engine, cfg.workload, prompt)  # front end, then prefill pool
    rows, p_steps, j_of, r_of, q_of = prefill_cohorts(pre, at_pool, prompt, copies, ranks)
    bpt = max(kv_bytes_per_token_chip(pre[1]), kv_bytes_per_token_chip(dec[1]))
    kv_bytes = kept_tokens(prompt, pre[1].kv_caps) * bpt
    link = cfg.disagg.kv_link
    ready = transfer_times(rows[:, Req.DONE], q_of, r_of, kv_bytes[j_of], link.bw_gb_s, link.latency_us)
    n = len(prompt)
    pre_rows = np.full((n, Req.size), np.nan)
    for col in (Req.START, Req.DONE, Req.PREEMPT):
        pre_rows[:, col] = cohort_mean(rows[:, col], j_of, n, copies)
    return {
        "arrival": send,
        "prefill": pre_rows,
        "decode": d_req,
        "ready": send + delay,
        "delay": cohort_mean(ready - send[j_of], j_of, n, copies),
        "kv_bytes": kv_bytes,
        "prefill_steps": p_steps,
        "decode_steps": [d_steps],
    }


def closed_pools(cfg) -> Tuple[tuple, tuple, Tuple[int, int], list]:
    """(prefill instance, decode instance) as (config, design, mixed design, MTP draft arrays or
    None); the decode rank's requests (arrival 0 for its first clients, NaN for those its clients
    send later); (decode ranks, prefill ranks); notes."""
    d, w = cfg.disagg, cfg.workload
    pre, notes = pool_design(cfg, "prefill", _ceil(w.concurrency, d.prefill.instances))
    dec, more = pool_design(cfg, "decode", _ceil(w.concurrency, d.decode.instances))
    ranks = d.decode.instances * groups(dec[0])
    per = group_workload(w, ranks).concurrency
    copies = active_ranks(w.concurrency, per, ranks)
    if copies < ranks:
        more = more + [f"{w.concurrency} clients fill {copies} of the {ranks} decode ranks"]
    # the rank's clients, and its share of the requests among the ranks they fill
    reqs = requests(with_fields(group_workload(w, copies), {"concurrency": per}), cfg.model.max_context)
    units = (copies, d.prefill.instances * groups(pre[0]))
    return (pre, dec), reqs, units, notes + more


def active_ranks(clients: int, per_rank: int, ranks: int) -> int:
    """The decode ranks the simulated one stands for: those the clients fill, `per_rank` each (the
    simulated rank's ceil(clients / ranks)), rounded half up, at least 1 and at most `ranks`: 4 clients
    over 7 ranks keep 4 ranks busy, not 7, so the prefill pool sees 4 copies of each request (the one-pool
    mode's core/parallel.py dp_token_scale, whole: a copy is a rank)."""
    return max(1, min(int(ranks), int(clients / max(per_rank, 1) + 0.5)))


def settle(cfg, pools, reqs, units) -> Tuple[Dict[str, object], int, str]:
    """Iterate one_round from zero delays: (the last round, rounds run, how it ended). It ends when
    no delay moves more than TOL_S, or when the delays repeat those of two rounds before (requests
    whose order flips at a step boundary every round: a two-round cycle)."""
    delay = np.zeros(len(reqs[1]))
    before = None
    for rounds in range(1, MAX_ROUNDS + 1):
        sim = one_round(cfg, pools, reqs, delay, units)
        moved = np.abs(sim["delay"] - delay)
        if moved.max() <= TOL_S:
            return sim, rounds, f"converged in {rounds} rounds"
        if before is not None and np.max(np.abs(sim["delay"] - before)) <= TOL_S:
            flips = int(np.sum(moved > TOL_S))
            return (
                sim,
                rounds,
                (
                    f"settled in {rounds} rounds into a two-round cycle of {flips} of {len(moved)} requests "
                    f"(delays {moved.max() * 1e3:.3g} ms apart)"
                ),
            )
        before, delay = delay, sim["delay"]
    return sim, rounds, f"did not converge in {rounds} rounds (last change {moved.max() * 1e3:.3g} ms)"


def simulate_closed(cfg) -> Dict[str, object]:
    """The fixed point of one_round (module docstring), in disagg.simulate_disagg's layout plus
    `copies` (decode ranks the simulated one stands for) and `units` (ranks simulated per pool)."""
    pools, reqs, units, notes = closed_pools(cfg)
    sim, rounds, how = settle(cfg, pools, reqs, units)
    copies, ranks = units
    notes.append(
        f"closed loop over the pools: one decode rank of {copies} simulated with its "
        f"{len(np.flatnonzero(reqs[0] == 0))} clients, the prefill pool ({ranks} ranks) with "
        f"{copies} copies of its requests; the prefill delays {how}"
    )
    sim.update(
        prompt=reqs[1],
        output=reqs[2],
        kv_tokens=kept_tokens(reqs[1], pools[0][1].kv_caps),
        configs=(pools[0][0], pools[1][0]),
        designs=(pools[0][1], pools[1][1]),
        notes=list(dict.fromkeys(notes)),
        copies=copies,
        units={"prefill": ranks, "decode": 1},
        rounds=rounds,
    )
    return sim
