"""`decodelab validate [csv=PATH] [--static] [--no-track] [overrides]`: simulate every row of a measured
serving CSV as the setting it was measured in (closed loop: `concurrency` clients, `isl` prompt
and `osl` output tokens, `precision`, `tp`) and compare predicted with measured TTFT and TPOT.

The CSV needs the columns of shared/validation/h100_llama31_8b_tp1.csv: model, precision, tp, isl,
osl, concurrency, ttft_ms, tpot_ms (an optional `system` column picks the hardware config;
default h100_sxm). Extra arguments are Hydra overrides applied to every row (e.g.
engine.chunk_size=2048). The table is printed and logged to MLflow as one run (unless --no-track).
`--static` replaces the serving simulation by the pure decode step: one static batch of
`concurrency` sequences, `isl` prompt and `osl` output tokens each (the calibration of the step
physics alone, docs/model.md; its TTFT, the whole batch's prefill at once, is not comparable).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from framework.serving_workload import REPO

DEFAULT_CSV = "h100_llama31_8b_tp1.csv"
COLUMNS = ("model", "precision", "tp", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
REQUESTS_PER_CLIENT = 10       # AIConfigurator assumes ~10x concurrency requests per measured point
PRECISIONS = {"bf16": ("bf16", "bf16"), "fp16": ("fp16", "fp16"), "fp8": ("fp8", "fp8")}


def default_csv() -> Path:
    """shared/validation next to the repository (../shared/validation from the repo root), or
    the same folder inside a parent directory of the working directory."""
    for base in (REPO.parent, *Path.cwd().resolve().parents, Path.cwd().resolve()):
        p = base / "shared" / "validation" / DEFAULT_CSV
        if p.is_file():
            return p
    return REPO.parent / "shared" / "validation" / DEFAULT_CSV


def _norm(s: str) -> str:
    s = s.lower().split("/")[-1]
    for suffix in ("-instruct", "-chat", "-hf"):
        s = s.replace(suffix, "")
    return re.sub(r"[^a-z0-9]", "", s)


def model_config_name(model: str) -> str:
    """conf/model/<name>.yaml whose name matches a model id (meta-llama/Llama-3.1-8B-Instruct ->
    llama3_1_8b)."""
    names = {_norm(p.stem): p.stem for p in (REPO / "conf" / "model").glob("*.yaml")}
    key = _norm(model)
    if key not in names:
        raise ValueError(f"model {model!r} has no config in conf/model/ (known: "
                         f"{', '.join(sorted(names.values()))})")
    return names[key]


def base_overrides(row, static: bool = False) -> List[str]:
    """Overrides that pick the design of a row (composed once per distinct design)."""
    prec = str(row["precision"]).lower()
    if prec not in PRECISIONS:
        raise ValueError(f"precision {prec!r} is not one of: {', '.join(PRECISIONS)}")
    w, kv = PRECISIONS[prec]
    system = str(row["system"]) if "system" in row and isinstance(row["system"], str) else "h100_sxm"
    tp = int(row["tp"])
    return [f"model={model_config_name(str(row['model']))}", f"hardware={system}",
            f"hardware.n_chips={tp}", f"hardware.tensor_parallel={tp}",
            "workload=decode" if static else "workload=closed_loop",
            f"workload.weight_dtype={w}", f"workload.kv_dtype={kv}", "workload.act_dtype=bf16"]


def row_workload(row, static: bool = False) -> Dict[str, int]:
    """The measured setting: closed loop, `concurrency` clients, isl / osl tokens (static: one
    batch of `concurrency` sequences)."""
    c = int(row["concurrency"])
    if static:
        return {"batch_size": c, "prompt_len": int(row["isl"]), "output_len": int(row["osl"])}
    return {"concurrency": c, "prompt_len": int(row["isl"]), "output_len": int(row["osl"]),
            "n_requests": REQUESTS_PER_CLIENT * c}


def run_validation(csv: Path, overrides: Optional[List[str]] = None, static: bool = False):
    """Predicted vs measured per row (a pandas DataFrame). `overrides` (Hydra syntax) apply to
    every row; a workload field they name is not replaced by the row's value."""
    import pandas as pd
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    import framework.schema  # noqa: F401
    from framework.app import CONF_DIR
    from framework.evaluate import evaluate
    df = pd.read_csv(csv, comment="#")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{csv} lacks columns: {', '.join(missing)}")
    overrides = list(overrides or [])
    pinned = {o.split("=", 1)[0] for o in overrides}
    bases, rows = {}, []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for n, (_, row) in enumerate(df.iterrows(), start=1):
            for col in ("ttft_ms", "tpot_ms"):
                if not float(row[col]) > 0:         # also NaN
                    raise ValueError(f"{csv.name} data row {n}: {col}={row[col]} must be > 0")
            key = tuple(base_overrides(row, static))
            if key not in bases:
                bases[key] = compose(config_name="config",
                                     overrides=["tracking=off", *key, *overrides])
            cfg = bases[key].copy()
            for field, value in row_workload(row, static).items():
                if f"workload.{field}" not in pinned:
                    OmegaConf.update(cfg, f"workload.{field}", value)
            res = evaluate(cfg, keep_steps=False)
            m = res["metrics"]
            rec = {k: row[k] for k in ("concurrency", "isl", "osl", "precision", "tp")}
            rec.update(status=res["status"], reason=res["reason"],
                       ttft_meas=float(row["ttft_ms"]), tpot_meas=float(row["tpot_ms"]),
                       ttft_pred=m.get("ttft_ms", float("nan")),
                       tpot_pred=m.get("tpot_ms", float("nan")))
            for k in ("ttft", "tpot"):
                rec[f"{k}_err_pct"] = 100.0 * (rec[f"{k}_pred"] / rec[f"{k}_meas"] - 1.0)
            rows.append(rec)
    return pd.DataFrame(rows)


def mape(df, key: str) -> float:
    return float(df[f"{key}_err_pct"].abs().mean())


def print_table(df, csv: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"decodelab validate: {csv.name} (error = predicted / measured - 1)")
    for col in ("conc", "isl", "osl", "TTFT meas", "TTFT pred", "err", "TPOT meas", "TPOT pred",
                "err"):
        t.add_column(col, justify="right")
    for _, r in df.iterrows():
        t.add_row(str(r["concurrency"]), str(r["isl"]), str(r["osl"]), f"{r['ttft_meas']:.1f}",
                  f"{r['ttft_pred']:.1f}", f"{r['ttft_err_pct']:+.1f}%", f"{r['tpot_meas']:.2f}",
                  f"{r['tpot_pred']:.2f}", f"{r['tpot_err_pct']:+.1f}%")
    Console().print(t)
    for _, r in df[df["status"] != "ok"].iterrows():
        Console().print(f"{r['status']} (concurrency {r['concurrency']}, isl {r['isl']}, osl "
                        f"{r['osl']}): {r['reason']}")
    Console().print(f"mean absolute percentage error: TPOT {mape(df, 'tpot'):.1f}%, "
                    f"TTFT {mape(df, 'ttft'):.1f}% over {len(df)} rows")


def _log(df, csv: Path) -> None:
    """One MLflow run with the MAPEs as metrics and the table as an artifact (tracking settings
    of the default config), as `decodelab claims` does."""
    import tempfile
    from hydra import compose, initialize_config_dir
    from framework import tracking
    from framework.app import CONF_DIR
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        tr = compose(config_name="config").tracking
    try:
        run = tracking.start_run(tr, f"validate {csv.name}", {
            "kind": "validate", "csv": str(csv), "git_commit": tracking.git_commit()})
        client = tracking._client(tr.uri)
        client.log_metric(run, "tpot_mape_pct", mape(df, "tpot"))
        client.log_metric(run, "ttft_mape_pct", mape(df, "ttft"))
        client.log_metric(run, "rows", float(len(df)))
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "validation.csv"
            df.to_csv(p, index=False, float_format="%.5g")
            client.log_artifact(run, str(p))
        tracking.end_run(tr, run)
    except Exception as e:  # never lose the printed table to a tracker problem
        print(f"warning: validation table not logged to MLflow ({type(e).__name__}: {e})")


def main(argv: List[str]) -> int:
    csv_arg = [a.split("=", 1)[1] for a in argv if a.startswith("csv=")]
    overrides = [a for a in argv if not a.startswith("csv=") and not a.startswith("--")]
    csv = Path(csv_arg[-1]).expanduser() if csv_arg else default_csv()
    flags = [a for a in argv if a.startswith("--") and a not in ("--static", "--no-track")]
    if flags:
        print(f"error: {' '.join(flags)}: the flags are --static and --no-track")
        return 2
    if not csv.is_file():
        print(f"error: csv={csv} is not a file")
        return 2
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    try:
        df = run_validation(csv, overrides, static="--static" in argv)
    except (ValueError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {str(e).strip().splitlines()[0]}")
        return 2
    print_table(df, csv)
    if "--no-track" not in argv:
        _log(df, csv)
    return 0
