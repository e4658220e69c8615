"""The decode step and the prefill interference inside each group of measured serving rows
(`decodelab validate --steps`; docs/validation.md).

A closed-loop client's TPOT is (the request's decode span) / (osl - 1). Its decode span holds
osl - 1 decode steps and the other clients' prefill work that lands between them, so across rows
that differ only in osl (same model, engine, TP, precision, concurrency, isl):

    TPOT = D + I / (osl - 1)

with D the decode step at that load and I the interference one request sees over its lifetime.
Least squares over the group's osl values gives (D, I) for the measured and for the simulated
TPOT alike; D's error separates a wrong step cost (operators, host work) from a wrong schedule
(how prefills land in decode spans), which the rows' TPOT errors mix. Groups with fewer than two
osl values are left out.

Beside them, each group's mean number of requests in their decode phase, by Little's law: a client
spends (osl - 1) x TPOT of each TTFT + (osl - 1) x TPOT cycle decoding, so

    N = concurrency x (osl - 1) x TPOT / (TTFT + (osl - 1) x TPOT)

requests decode at once on average (measured and predicted, the mean over the group's rows). A
predicted N well above the measured one says the engine ran fewer requests at once than the model
lets it (a KV pool, batch cap or admission rule the model does not have), not that a step costs
more; a D error with equal N says the opposite.

In a closed loop of equal cycles, each of the other concurrency - 1 clients sends one prompt while
a request decodes, so (I measured - I predicted) / (concurrency - 1) is the work of one prompt's
step that the prediction lacks or adds (`stall_ms`). Beside it the group's mean TTFT gap (measured
- predicted, `ttft_gap_ms`): a prompt step that is short by the same amount delays the prompt's own
first token by it too, so the two agree where the step itself, not the client or the front end,
is short (docs/journal/2026-12-02-gap-budget.md)."""

from __future__ import annotations

import numpy as np

GROUP = ["model", "engine", "engine_version", "tp", "precision", "concurrency", "isl"]


def fit(osl, tpot):
    """(D, I) of TPOT = D + I / (osl - 1), least squares (ms and ms x tokens)."""
    x = 1.0 / (np.asarray(osl, float) - 1.0)
    a = np.vstack([np.ones_like(x), x]).T
    d, i = np.linalg.lstsq(a, np.asarray(tpot, float), rcond=None)[0]
    return float(d), float(i)


def cycle_ms(osl, ttft_ms, tpot_ms):
    """A closed-loop client's cycle, TTFT + (osl - 1) x TPOT: one request at a time and no think
    time, so the mean request latency (TTFT and TPOT being means over requests). Arrays or floats."""
    return np.asarray(ttft_ms, float) + (np.asarray(osl, float) - 1.0) * np.asarray(tpot_ms, float)


def decoding(concurrency, osl, ttft_ms, tpot_ms):
    """Mean requests in their decode phase of a closed loop (Little's law): concurrency x the share
    of each client's cycle spent decoding. Arrays or floats."""
    span = (np.asarray(osl, float) - 1.0) * np.asarray(tpot_ms, float)
    return np.asarray(concurrency, float) * span / cycle_ms(osl, ttft_ms, tpot_ms)


def output_rate(concurrency, osl, ttft_ms, tpot_ms):
    """Output tokens per second of all `concurrency` clients of a closed loop that TTFT and TPOT
    imply (Little's law): each client completes a request of `osl` tokens per cycle. How much a
    design serves, whatever the split of the time into TTFT and TPOT; NaN where the cycle is not
    positive or not known. Arrays or floats."""
    cycle = cycle_ms(osl, ttft_ms, tpot_ms)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = 1000.0 * np.asarray(concurrency, float) * np.asarray(osl, float) / cycle
    return np.where(cycle > 0, rate, np.nan)


def step_split(df):
    """One row per group with >= 2 osl values among the `ok` rows of a validation frame: rows,
    osl values, D and I measured and predicted, D's error in %, the prompt step's stall and the
    TTFT gap (ms), and the mean decoding requests N measured and predicted."""
    import pandas as pd  # heavy: on use

    ok = df[df["status"] == "ok"] if "status" in df else df
    out = []
    for key, g in ok.fillna({"engine_version": ""}).groupby(GROUP, sort=True):
        if g["osl"].nunique() < 2:
            continue
        dm, im = fit(g["osl"], g["tpot_meas"])
        dp, ip = fit(g["osl"], g["tpot_pred"])
        row = dict(zip(GROUP, key))
        row.update(
            rows=len(g),
            osl=",".join(str(int(v)) for v in sorted(g["osl"].unique())),
            d_meas_ms=dm,
            d_pred_ms=dp,
            d_err_pct=100.0 * (dp / dm - 1.0),
            i_meas_ms=im,
            i_pred_ms=ip,
            stall_ms=_per_prompt(im - ip, key[GROUP.index("concurrency")]),
            ttft_gap_ms=float((g["ttft_meas"] - g["ttft_pred"]).mean()),
            n_meas=float(decoding(g["concurrency"], g["osl"], g["ttft_meas"], g["tpot_meas"]).mean()),
            n_pred=float(decoding(g["concurrency"], g["osl"], g["ttft_pred"], g["tpot_pred"]).mean()),
        )
        out.append(row)
    cols = GROUP + ["rows", "osl", "d_meas_ms", "d_pred_ms", "d_err_pct", "i_meas_ms", "i_pred_ms"]
    cols += ["stall_ms", "ttft_gap_ms", "n_meas", "n_pred"]
    return pd.DataFrame(out, columns=cols)


def _per_prompt(interference_ms: float, concurrency) -> float:
    """Interference over a request's decode span per other client's prompt (NaN at one client)."""
    others = float(concurrency) - 1.0
    return interference_ms / others if others > 0 else float("nan")
