"""Closed-loop clients on a disaggregated deployment (workload=closed_loop with disagg.enabled;
framework/modes/serving/disagg.py runs the open loop).

`concurrency` clients each send a request, wait for its last token from the decode pool and send
the next one (the benchmark client of docs/validation.md, "How a row runs"). The decode pool has
R = instances x attention groups ranks, and the clients' requests reach them as evenly as a
dispatcher that keeps every rank within one request of the others: C clients over R ranks put
floor(C / R) on every rank and one more on C mod R of them (fewer clients than ranks: one each on C
ranks, the rest idle). Each kind of rank (`rank_types`: its clients, how many ranks hold that many)
is simulated once (its clients, their share of the requests, its scheduler with Eng.READY and a
closed loop) and stands for the ranks of its kind; the prefill pool sees that many copies of each
of its requests (a cohort: the j-th request of every rank of a kind is sent at the same time; round
robin in sending order over the prefill pool's P x groups ranks; each rank first come first served,
one scheduler each). With 13 clients on 11 ranks of one request each, 9 ranks serve one client and 2
ranks two: every rank is busy and 2 requests wait, 2 / 11 of a request's time on average, where
ceil(13 / 11) = 2 clients on 7 ranks kept 4 ranks idle and every second request waiting a whole
request's time. A request's prefill delay d (send -> its KV is in the decode rank: prefill queue,
prefill, the KV transfer of disagg_pools.transfer_times, FIFO on each NIC) is the mean of its
cohort's, which the decode rank sees as the client's delay before the request arrives (the
scheduler's per-request think time).

The two pools are coupled (the decode ranks' completions are the prefill pool's arrivals, the
prefill pool's delays the decode ranks' arrivals), so the delays are the fixed point of: decode
ranks with delays d -> send times -> prefill pool and transfers -> delays d'. Starting from d = 0
it is iterated until no delay moves more than TOL_S, or the delays repeat those of two rounds
before (a few requests whose order flips each round, e.g. two transfers of equal prefill end taking
a NIC in turn), or MAX_ROUNDS (said in a note). A decode rank reads each request once its KV has
arrived, whatever order its clients sent them in (recv.receive: prompts of unequal length end their
prefills out of sending order). The run's requests are every simulated rank's, each counted
once per rank it stands for (`expand`); its decode steps weigh as many ranks (`decode_step_weights`)."""

from __future__ import annotations

from typing import Dict, List, Tuple

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
from decodelab.modes.serving.workload import requests
from decodelab.modes.serving.layout import Req

TOL_S = 1e-6  # a delay that moves less than 1 us between two rounds has converged
MAX_ROUNDS = 40


def _ceil(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def rank_types(clients: int, ranks: int) -> List[Tuple[int, int]]:
    """[(clients on a decode rank, ranks holding that many)] of `clients` spread over `ranks` as
    evenly as they go: floor(C / R) on every rank and one more on C mod R of them; C <= R: one client
    on each of C ranks (module docstring)."""
    clients, ranks = int(clients), max(int(ranks), 1)
    if clients <= ranks:
        return [(1, clients)]
    lo, extra = divmod(clients, ranks)
    return [(lo, ranks - extra)] + ([(lo + 1, extra)] if extra else [])


def rank_workload(w, clients: int, n_requests: float):
    """The closed loop of one decode rank with `clients` of the workload's clients and `n_requests`
    of its measured requests (at least one a client)."""
    return with_fields(
        w,
        {
            "concurrency": int(clients),
            "n_requests": max(int(clients), int(round(n_requests))),
            "warmup_requests": _ceil(w.warmup_requests * clients, max(int(w.concurrency), 1)),
        },
    )


def rank_requests(w, types: List[Tuple[int, int]], cap: int) -> List[float]:
    """The measured requests a rank of each kind serves: the run's (its n_requests, else 10 a client)
    dealt in proportion to the requests a rank runs at once, its clients or its batch cap (`cap`:
    disagg.<pool>.max_batch, else engine.max_batch; 0: none) where fewer, so that every rank is busy
    for the same time as under a dispatcher that hands the next prompt to whichever rank frees a
    slot (the benchmark's clients share one list of prompts)."""
    total = float(w.n_requests or 10 * int(w.concurrency))
    slots = [min(k, cap) if cap > 0 else k for k, _ in types]
    return [total * s / sum(s * n for s, (_, n) in zip(slots, types)) for s in slots]


def prefill_cohorts(pre, sends: List[np.ndarray], prompts: List[np.ndarray], counts: List[int], ranks: int):
    """The prefill pool over `counts[t]` copies of each request of rank kind t (sent at sends[t]):
    per copy its kind, request, decode rank (the kinds' ranks numbered in turn) and prefill rank
    (round robin in sending order); each prefill rank's steps."""
    t_of, j_of, r_of, send, prompt = [], [], [], [], []
    first = 0
    for t, (s, p, n) in enumerate(zip(sends, prompts, counts)):
        m = len(s)
        t_of.append(np.full(m * n, t))
        j_of.append(np.repeat(np.arange(m), n))
        r_of.append(first + np.tile(np.arange(n), m))
        send.append(np.repeat(s, n))
        prompt.append(np.repeat(p, n))
        first += n
    t_of, j_of, r_of, send, prompt = (np.concatenate(a) for a in (t_of, j_of, r_of, send, prompt))
    q_of = np.empty(len(send), dtype=np.int64)
    q_of[np.argsort(send, kind="stable")] = np.arange(len(send)) % ranks
    rows, steps = run_ranks(pre, q_of, send, prompt, np.ones(len(send)), False, "prefill")
    return rows, steps, (t_of, j_of, r_of, q_of)


def cohort_mean(values: np.ndarray, j_of: np.ndarray, n: int, copies: int) -> np.ndarray:
    return np.bincount(j_of, weights=values, minlength=n) / copies


def decode_ranks(cfg, dec, kinds, delays: List[np.ndarray]):
    """Each rank kind's decode rank with its requests' delays: (requests, steps, send times) each."""
    out = []
    for ((arrival0, prompt, output), _, _), delay in zip(kinds, delays):
        first = np.where(np.isnan(arrival0), np.nan, arrival0 + delay)
        think = delay + cfg.workload.think_ms * 1e-3
        d_req, d_steps = run_instance(*dec, first, prompt, output, True, "decode", think=think)
        out.append((d_req, d_steps, d_req[:, Req.ARRIVAL] - delay))
    return out


def one_round(cfg, pools, kinds, delays: List[np.ndarray], ranks: int) -> Dict[str, object]:
    """The decode ranks with the requests' delays, then the prefill pool and the transfers of their
    cohorts: the new delays and everything the metrics read, per rank kind."""
    pre, dec = pools
    decoded = decode_ranks(cfg, dec, kinds, delays)
    prompts = [k[0][1] for k in kinds]
    counts = [k[1] for k in kinds]
    at_pool = [d[2] + frontend.delays(cfg.engine, cfg.workload, p) for d, p in zip(decoded, prompts)]
    rows, p_steps, (t_of, j_of, r_of, q_of) = prefill_cohorts(pre, at_pool, prompts, counts, ranks)
    bpt = max(kv_bytes_per_token_chip(pre[1]), kv_bytes_per_token_chip(dec[1]))
    kv_bytes = [kept_tokens(p, pre[1].kv_caps) * bpt for p in prompts]
    link = cfg.disagg.kv_link
    entry_bytes = np.concatenate([np.repeat(b, n) for b, n in zip(kv_bytes, counts)])
    ready = transfer_times(rows[:, Req.DONE], q_of, r_of, entry_bytes, link.bw_gb_s, link.latency_us)
    send_of = np.concatenate([np.repeat(d[2], n) for d, n in zip(decoded, counts)])
    out: Dict[str, list] = {
        k: [] for k in ("arrival", "prefill", "decode", "ready", "delays", "decode_steps")
    }
    for t, ((d_req, d_steps, send), n) in enumerate(zip(decoded, counts)):
        mask, m = t_of == t, len(send)
        pre_rows = np.full((m, Req.size), np.nan)
        for col in (Req.START, Req.DONE, Req.PREEMPT):
            pre_rows[:, col] = cohort_mean(rows[mask, col], j_of[mask], m, n)
        delay = cohort_mean((ready - send_of)[mask], j_of[mask], m, n)
        for key, value in zip(out, (send, pre_rows, d_req, send + delays[t], delay, d_steps)):
            out[key].append(value)
    return {**out, "delay": np.concatenate(out["delays"]), "kv_bytes": kv_bytes, "prefill_steps": p_steps}


def closed_pools(cfg) -> Tuple[tuple, list, int, list]:
    """(prefill instance, decode instance) as (config, design, mixed design, MTP draft arrays or
    None); the rank kinds as [((arrival 0 for a rank's first clients, NaN for those its clients send
    later, prompt, output), ranks of that kind, clients of such a rank)]; the prefill pool's ranks;
    notes."""
    d, w = cfg.disagg, cfg.workload
    pre, notes = pool_design(cfg, "prefill", _ceil(w.concurrency, d.prefill.instances))
    dec, more = pool_design(cfg, "decode", _ceil(w.concurrency, d.decode.instances))
    ranks = d.decode.instances * groups(dec[0])
    types = rank_types(w.concurrency, ranks)
    shares = rank_requests(w, types, int(dec[0].engine.max_batch))  # the pool's cap, else the engine's
    kinds = [
        (requests(rank_workload(w, k, m), cfg.model.max_context), n, k) for (k, n), m in zip(types, shares)
    ]
    busy = sum(k[1] for k in kinds)
    if busy < ranks:
        more = more + [f"{w.concurrency} clients fill {busy} of the {ranks} decode ranks"]
    return (pre, dec), kinds, d.prefill.instances * groups(pre[0]), notes + more


def settle(cfg, pools, kinds, ranks) -> Tuple[Dict[str, object], int, str]:
    """Iterate one_round from zero delays: (the last round, rounds run, how it ended). It ends when
    no delay moves more than TOL_S, or when the delays repeat those of two rounds before (requests
    whose order flips at a step boundary every round: a two-round cycle)."""
    sizes = [len(k[0][1]) for k in kinds]
    split = np.cumsum(sizes)[:-1]
    delay = np.zeros(int(sum(sizes)))
    before = None
    for rounds in range(1, MAX_ROUNDS + 1):
        sim = one_round(cfg, pools, kinds, np.split(delay, split), ranks)
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


def expand(parts: List[np.ndarray], counts: List[int]) -> np.ndarray:
    """Per-request arrays of the rank kinds, each kind's repeated once per rank it stands for."""
    return np.concatenate([np.concatenate([p] * n) for p, n in zip(parts, counts)])


def simulate_closed(cfg) -> Dict[str, object]:
    """The fixed point of one_round (module docstring), in disagg.simulate_disagg's layout: the
    requests of every rank the simulated ones stand for (`expand`), the decode steps with the ranks
    each stands for (`decode_step_weights`), `units` the ranks simulated per pool."""
    pools, kinds, ranks, notes = closed_pools(cfg)
    sim, rounds, how = settle(cfg, pools, kinds, ranks)
    counts = [k[1] for k in kinds]
    held = ", ".join(f"{n} with {c} client{'s' if c > 1 else ''}" for _, n, c in kinds)
    notes.append(
        f"closed loop over the pools: the decode ranks the clients fill ({held}) simulated one of each kind, "
        f"the prefill pool ({ranks} ranks) with a copy of each request per rank; the prefill delays {how}"
    )
    prompts = [k[0][1] for k in kinds]
    kv_tokens = [kept_tokens(p, pools[0][1].kv_caps) for p in prompts]
    sim.update(
        {key: expand(sim[key], counts) for key in ("arrival", "prefill", "decode", "ready", "kv_bytes")},
        prompt=expand(prompts, counts),
        output=expand([k[0][2] for k in kinds], counts),
        kv_tokens=expand(kv_tokens, counts),
        configs=(pools[0][0], pools[1][0]),
        designs=(pools[0][1], pools[1][1]),
        notes=list(dict.fromkeys(notes)),
        units={"prefill": ranks, "decode": sum(counts)},
        decode_step_weights=counts,
        rounds=rounds,
    )
    return sim
