"""AIConfigurator's own TTFT / TPOT predictions for the rows of a CSV in its `silicon_sample.csv`
schema, written as a peer file for `decodelab validate --csv ROWS --peer PEER`.

Runs under AIConfigurator's own virtualenv, never decodelab's (decodelab does not depend on it):

    python3 -m venv /work/venv-aic && /work/venv-aic/bin/pip install aiconfigurator
    /work/venv-aic/bin/python tools/aic_peer.py ROWS.csv PEER.csv

Each row is one call of AIConfigurator's single-point estimator (`aiconfigurator.cli.api.
cli_estimate`, the code behind `aiconfigurator cli estimate`) with the row's own settings: model_path,
system, backend, mode (agg or disagg), isl, osl, gemm / moe quant modes, batch_size (per attention-DP
rank, as the schema counts it), tp / pp / attention-DP / MoE split, and for disagg rows the
prefill_* / decode_* pools (an empty pp / attention-DP cell is 1; MoE sizes of 0 x 0 mean experts
tensor-parallel over the pool's GPUs). Everything else is the estimator's default (ctx_tokens = isl,
KV and FMHA dtypes inferred from the checkpoint). A row the SILICON database cannot answer with the
row's quant modes is retried with the quant modes the estimator infers from the checkpoint (the
schema records gpt-oss's MXFP4 experts as `nvfp4`; the checkpoint gives BF16 GEMMs + w4a16_mxfp4
experts), then in HYBRID database mode (SILICON tables extended by its SOL + empirical estimates),
inferred then row quant; columns `database_mode` and `quant` record which answered (--silicon-only:
the first attempt only).

Its performance database is chosen per row: the row's (system, backend, backend_version) when the
wheel ships that version as queryable, else the newest shipped version not newer than the row's,
else the oldest shipped one (column `db_version`). Only the estimator is called: this script reads
no measured column of ROWS and nothing else of the wheel's data.

Output columns: row (1-based data row of ROWS), id, ttft_ms, tpot_ms, db_version, database_mode,
quant, aic_version, reason (why a row has no prediction; empty when it has one)."""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import time
from importlib.metadata import version as dist_version

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # model configs come from the wheel, never the network

POOL = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
ONE = ("pp_size", "attention_dp_size")  # an empty cell of these is 1
FIELDS = ("row", "id", "ttft_ms", "tpot_ms", "db_version", "database_mode", "quant", "aic_version", "reason")
# Tried in order until the estimator answers: (database mode, quant modes from the row or inferred by
# the estimator from the checkpoint); `database_mode` and `quant` record the one that answered.
ATTEMPTS = (("SILICON", "row"), ("SILICON", "inferred"), ("HYBRID", "inferred"), ("HYBRID", "row"))


def whole(row: dict, col: str, default=None):
    """The integer in a cell, or `default` when it is empty."""
    v = (row.get(col) or "").strip()
    return int(float(v)) if v else default


def moe_split(row: dict, prefix: str, is_moe: bool) -> dict:
    """MoE TP / EP sizes of a pool. The schema fills them on dense models (dropped) and writes 0 x 0
    for experts over all the pool's GPUs (then tensor-parallel over tp x attention DP)."""
    if not is_moe:
        return {"moe_tp_size": None, "moe_ep_size": None}
    out = {k: whole(row, prefix + k) or None for k in ("moe_tp_size", "moe_ep_size")}
    if out["moe_tp_size"] is None and out["moe_ep_size"] is None:
        gpus = whole(row, prefix + "tp_size", 1) * whole(row, prefix + "attention_dp_size", 1)
        out["moe_tp_size"] = gpus
    return out


def version_key(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(v))
    except InvalidVersion:
        return (0, Version("0"))


def pick_version(system: str, backend: str, wanted: str) -> str:
    """The row's version when shipped as queryable, else the newest not newer, else the oldest."""
    from aiconfigurator.sdk.perf_database import get_version_slots

    slots = get_version_slots(system, backend) or {}
    shipped = sorted({v for v in slots.values() if v}, key=version_key)
    if not shipped:
        raise LookupError(f"no database for {system}/{backend}")
    if wanted in shipped:
        return wanted
    older = [v for v in shipped if version_key(v) <= version_key(wanted)]
    return older[-1] if older and version_key(wanted)[0] else shipped[0]


def row_kwargs(row: dict, is_moe: bool) -> dict:
    """cli_estimate keyword arguments for one row (its own columns, AIConfigurator's names)."""
    quant = {k: (row.get(k) or "").strip() or None for k in ("gemm_quant_mode", "moe_quant_mode")}
    kw = dict(mode=row["mode"].strip(), isl=whole(row, "isl"), osl=whole(row, "osl"), **quant)
    if kw["mode"] == "disagg":
        for side in ("prefill", "decode"):
            for k in POOL:
                if not k.startswith("moe_"):
                    kw[f"{side}_{k}"] = whole(row, f"{side}_{k}", 1 if k in ONE else None)
            kw.update({f"{side}_{k}": v for k, v in moe_split(row, f"{side}_", is_moe).items()})
        kw["tp_size"] = kw["prefill_tp_size"]
        return kw
    kw.update({k: whole(row, k, 1 if k in ONE else None) for k in ("batch_size", "tp_size", *ONE)})
    kw.update(moe_split(row, "", is_moe))
    return kw


def unexpressed(row: dict) -> str:
    """Why the estimator cannot take a row at all ('' when it can)."""
    if row["mode"].strip() == "disagg":
        sizes = [f"{s}_{k}" for s in ("prefill", "decode") for k in ("num_workers", "batch_size")]
        if any(whole(row, c) is None for c in sizes):
            return "disagg pool sizes not recorded (prefill/decode_num_workers, _batch_size empty)"
    return ""


def estimate(row: dict, db_mode: str, quant: str):
    """One cli_estimate call for a row: (the result's ttft, tpot, the database version)."""
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator.sdk.models import check_is_moe

    system, backend = row["system"].strip(), row["backend"].strip()
    ver = pick_version(system, backend, row["backend_version"].strip())
    kw = row_kwargs(row, check_is_moe(row["model_path"].strip()))
    if quant == "inferred":
        kw.update(gemm_quant_mode=None, moe_quant_mode=None)
    r = cli_estimate(
        row["model_path"].strip(), system, backend_name=backend, backend_version=ver,
        database_mode=db_mode, **kw,
    )  # fmt: skip
    return r.ttft, r.tpot, ver


def predict(row: dict, attempts=ATTEMPTS) -> dict:
    """One row's prediction from the first attempt that answers, else the first attempt's reason."""
    why = unexpressed(row)
    if why:
        return {"reason": why}
    first = ""
    for db_mode, quant in attempts:
        try:
            ttft, tpot, ver = estimate(row, db_mode, quant)
        except Exception as e:  # the estimator's own refusal, recorded per row
            first = first or f"{type(e).__name__}: {' '.join(str(e).split())[:240]}"
            continue
        got = {"ttft_ms": f"{ttft:.4f}", "tpot_ms": f"{tpot:.4f}", "db_version": ver}
        return {**got, "database_mode": db_mode, "quant": quant}
    return {"reason": first}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="CSV in AIConfigurator's silicon_sample.csv schema")
    ap.add_argument("out", help="peer CSV to write (row, id, ttft_ms, tpot_ms, ...)")
    ap.add_argument("--silicon-only", action="store_true", help="SILICON database, row quant modes only")
    ap.add_argument("--mode", choices=("agg", "disagg"), help="only rows of this mode")
    ap.add_argument("--limit", type=int, help="only the first N rows (timing)")
    a = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    aic = dist_version("aiconfigurator")
    attempts = ATTEMPTS[:1] if a.silicon_only else ATTEMPTS
    with open(a.rows, newline="") as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]
    t0, done = time.time(), 0
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, row in enumerate(rows[: a.limit] if a.limit else rows, start=1):
            if a.mode and row["mode"].strip() != a.mode:
                continue
            w.writerow({"row": i, "id": row.get("id", ""), "aic_version": aic, **predict(row, attempts)})
            f.flush()
            done += 1
    print(f"{done} rows in {time.time() - t0:.0f} s -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
