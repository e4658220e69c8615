"""Predict every row of a measured serving CSV (decodelab validate; docs/validation.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from decodelab.config import compose as C
from decodelab.modes.dispatch import evaluate
from decodelab.paths import CONF_DIR, VALIDATION_DIR

DEFAULT_CSV = "h100_llama31_8b_tp1.csv"
COLUMNS = ("model", "precision", "tp", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
REQUESTS_PER_CLIENT = 10  # AIConfigurator assumes ~10x concurrency requests per measured point
PRECISIONS = {"bf16": ("bf16", "bf16"), "fp16": ("fp16", "fp16"), "fp8": ("fp8", "fp8")}


def default_csv() -> Path:
    """The measured rows shipped with decodelab (decodelab/data/validation, copied from the public
    AIConfigurator project; provenance and licence in its README.md)."""
    return VALIDATION_DIR / DEFAULT_CSV


def _norm(s: str) -> str:
    s = s.lower().split("/")[-1]
    for suffix in ("-instruct", "-chat", "-hf"):
        s = s.replace(suffix, "")
    return re.sub(r"[^a-z0-9]", "", s)


def model_config_name(model: str) -> str:
    """conf/model/<name>.yaml whose name matches a model id (meta-llama/Llama-3.1-8B-Instruct ->
    llama3_1_8b)."""
    names = {_norm(p.stem): p.stem for p in (CONF_DIR / "model").glob("*.yaml")}
    key = _norm(model)
    if key not in names:
        raise ValueError(
            f"model {model!r} has no config in conf/model/ (known: {', '.join(sorted(names.values()))})"
        )
    return names[key]


def base_overrides(row, static: bool = False) -> List[str]:
    """Overrides that pick the design of a row (composed once per distinct design)."""
    prec = str(row["precision"]).lower()
    if prec not in PRECISIONS:
        raise ValueError(f"precision {prec!r} is not one of: {', '.join(PRECISIONS)}")
    w, kv = PRECISIONS[prec]
    system = str(row["system"]) if "system" in row and isinstance(row["system"], str) else "h100_sxm"
    tp = int(row["tp"])
    return [
        f"model={model_config_name(str(row['model']))}",
        f"hardware={system}",
        f"hardware.n_chips={tp}",
        f"hardware.tensor_parallel={tp}",
        "workload=decode" if static else "workload=closed_loop",
        f"workload.weight_dtype={w}",
        f"workload.kv_dtype={kv}",
        "workload.act_dtype=bf16",
    ]


def row_workload(row, static: bool = False) -> Dict[str, int]:
    """The measured setting: closed loop, `concurrency` clients, isl / osl tokens (static: one
    batch of `concurrency` sequences)."""
    c = int(row["concurrency"])
    if static:
        return {"batch_size": c, "prompt_len": int(row["isl"]), "output_len": int(row["osl"])}
    return {
        "concurrency": c,
        "prompt_len": int(row["isl"]),
        "output_len": int(row["osl"]),
        "n_requests": REQUESTS_PER_CLIENT * c,
    }


def run_validation(csv: Path, overrides: Optional[List[str]] = None, static: bool = False):
    """Predicted vs measured per row (a pandas DataFrame). `overrides` (Hydra syntax) apply to
    every row; a workload field they name is not replaced by the row's value."""
    import pandas as pd
    from omegaconf import OmegaConf

    df = pd.read_csv(csv, comment="#")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{csv} lacks columns: {', '.join(missing)}")
    overrides = list(overrides or [])
    pinned = {o.split("=", 1)[0] for o in overrides}
    bases, rows = {}, []
    with C.context():
        for n, (_, row) in enumerate(df.iterrows(), start=1):
            for col in ("ttft_ms", "tpot_ms"):
                if not float(row[col]) > 0:  # also NaN
                    raise ValueError(f"{csv.name} data row {n}: {col}={row[col]} must be > 0")
            key = tuple(base_overrides(row, static))
            if key not in bases:
                bases[key] = C.compose_in_context(["tracking=off", *key, *overrides])
            cfg = bases[key].copy()
            for field, value in row_workload(row, static).items():
                if f"workload.{field}" not in pinned:
                    OmegaConf.update(cfg, f"workload.{field}", value)
            res = evaluate(cfg, keep_steps=False)
            m = res["metrics"]
            rec = {k: row[k] for k in ("concurrency", "isl", "osl", "precision", "tp")}
            rec.update(
                status=res["status"],
                reason=res["reason"],
                ttft_meas=float(row["ttft_ms"]),
                tpot_meas=float(row["tpot_ms"]),
                ttft_pred=m.get("ttft_ms", float("nan")),
                tpot_pred=m.get("tpot_ms", float("nan")),
            )
            for k in ("ttft", "tpot"):
                rec[f"{k}_err_pct"] = 100.0 * (rec[f"{k}_pred"] / rec[f"{k}_meas"] - 1.0)
            rows.append(rec)
    return pd.DataFrame(rows)


def mape(df, key: str) -> float:
    """Mean absolute percentage error of `key` (ttft or tpot) over the rows."""
    return float(df[f"{key}_err_pct"].abs().mean())
