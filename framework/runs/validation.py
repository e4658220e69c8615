"""Predict every row of a measured serving CSV (decodelab validate; docs/validation.md).

Each row runs as it was measured: the engine its `engine` / `engine_version` columns name (the
conf/engine file whose `family` and `versions` match), the row's model, precision and tensor
parallelism, and the benchmark client of the measurement (workload=closed_loop: `concurrency`
clients released at t = 0, 10 x concurrency measured requests, 2 x concurrency warm-up requests
drained before the measurement, TTFT timed from each request's send); a row of AIConfigurator's
schema runs the client of its measurement source (runs/aic_clients.py: InferenceX's lengths uniform
in [0.8 L, L])."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from decodelab.paths import VALIDATION_DIR
from decodelab.runs import aic_candidates, aic_rows, validation_columns
from decodelab.runs.validation_names import (  # noqa: F401 (part of this module's API)
    engine_config_name,
    engine_maps,
    engine_table,
    hardware_config_name,
    model_config_name,
    version_notes,
)
from decodelab.runs.validation_disagg import is_disagg, pool_overrides
from decodelab.runs.validation_names import _model_yaml
from decodelab.runs.validation_predict import (  # noqa: F401 (the row settings, part of this module's API)
    AIC_LAUNCHED,
    REQUESTS_PER_CLIENT,
    UNMAPPED,
    WARMUP_PER_CLIENT,
    _norm,
    aic_launched,
    engine_family,
    launch_engine,
    launch_file,
    launch_overrides,
    predict_rows,
    row_version,
    row_workload,
    version_of,
)

DEFAULT_CSV = "h100_llama31_8b_tp1.csv"
COLUMNS = ("model", "engine", "precision", "tp", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
INT_COLUMNS = ("tp", "isl", "osl", "concurrency")
PARALLEL_COLUMNS = ("pp", "dp", "ep", "moe_ep", "moe_tp")  # optional (parallel_overrides)
# A row's `precision` -> (weight dtype, KV dtype). The rows do not record the KV dtype: a stated
# assumption, not a fit. FP8 rows: FP8 weights and FP8 KV (AIConfigurator passes its KV quant mode
# to the engine as kv_cache_dtype, generator/config/backend_config_mapping.yaml @095f58a5; NVIDIA's
# ModelOpt FP8 checkpoints state kv_cache_quant_algo FP8). `fp8` means the model's published FP8
# checkpoint: block-scaled (model.fp8_checkpoint: block, Qwen3 and DeepSeek) runs fp8_block GEMMs.
# NVFP4 (NVIDIA ModelOpt checkpoints): FP8 KV. MXFP4 (gpt-oss): BF16 KV. Weight-only int8 / int4:
# BF16 KV.
PRECISIONS = {
    "bf16": ("bf16", "bf16"),
    "fp16": ("fp16", "fp16"),
    "float16": ("fp16", "fp16"),
    "bfloat16": ("bf16", "bf16"),
    "fp8": ("fp8", "fp8"),  # fp8_block weights for a model whose FP8 checkpoint is block-scaled
    "fp8_block": ("fp8_block", "fp8"),
    "fp8_static": ("fp8", "fp8"),
    "nvfp4": ("nvfp4", "fp8"),
    "fp4": ("nvfp4", "fp8"),
    "mxfp4": ("mxfp4", "bf16"),
    "int8_wo": ("int8", "bf16"),
    "int4_wo": ("int4", "bf16"),
    # a 4-bit integer checkpoint named by its bit width: moonshotai/Kimi-K2.5 ships INT4 weights, group 32, without
    # activation quantization (W4A16; its config.json quantization_config, conf/model/kimi_k2_5.yaml)
    "int4": ("int4", "bf16"),
    # AIConfigurator's quant-mode names (aic-core sdk/common.py GEMMQuantMode / MoEQuantMode): 4-bit
    # expert weights with FP8 activations (TensorRT-LLM's DeepSeek w4a8) and gpt-oss's MXFP4 experts
    "w4afp8": ("int4", "fp8"),
    "w4a16_mxfp4": ("mxfp4", "bf16"),
    "w4a8_mxfp4_mxfp8": ("mxfp4", "bf16"),
}
# A precision that names the activations of MXFP4 experts sets engine.moe_mxfp4 (which measured MoE
# rows cost them); plain `mxfp4` keeps the engine file's choice for the chip.
MXFP4_ACTIVATIONS = {"w4a16_mxfp4": "w4a16", "w4a8_mxfp4_mxfp8": "w4a8"}
# AIConfigurator's own column names (its silicon_sample.csv schema, as its tools read it:
# tools/accuracy_tracking/run_silicon.py, cli_estimate's arguments): used where the CSV lacks
# decodelab's name. `batch_size` is the aggregated run's concurrency ("max concurrent requests").
# Without a `precision` column a row's precision is its moe_quant_mode (the experts hold most of an
# MoE model's bytes) where given, else its gemm_quant_mode.
ALIASES = {
    "model_path": "model",
    "backend": "engine",
    "backend_version": "engine_version",
    "tp_size": "tp",
    "pp_size": "pp",
    "attention_dp_size": "dp",
    "moe_tp_size": "moe_tp",
    "moe_ep_size": "moe_ep",
    "batch_size": "concurrency",
    "silicon_ttft_ms": "ttft_ms",
    "silicon_tpot_ms": "tpot_ms",
}
AGG_MODES = ("agg", "")  # a `mode` column's aggregated (one engine serves prefill and decode) rows
LAUNCHES = validation_columns.LAUNCHES  # validate --launch's values (also a `launch` cell's)
GROUPS = ("engine", "model", "tp", "concurrency")


def default_csv() -> Path:
    """The measured rows shipped with decodelab (decodelab/data/validation, copied from the public
    AIConfigurator project; provenance and licence in its README.md)."""
    return VALIDATION_DIR / DEFAULT_CSV


def check_rows(df, csv: Path) -> None:
    """One ValueError naming the first bad column or row: missing columns, no data rows,
    non-positive or non-numeric sizes (the optional parallelism columns too, where not empty) and
    measurements."""
    import pandas as pd

    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{csv.name} lacks columns: {', '.join(missing)} (needs {', '.join(COLUMNS)})")
    if df.empty:
        raise ValueError(f"{csv.name} has a header but no data rows")
    optional = tuple(c for c in PARALLEL_COLUMNS if c in df.columns)
    for col in INT_COLUMNS + optional + ("ttft_ms", "tpot_ms"):
        v = pd.to_numeric(df[col], errors="coerce")
        whole = col in INT_COLUMNS + optional
        bad = ~(v > 0) | (v.round() != v if whole else False)
        if col in optional:  # an empty cell: the column's default, 1
            bad &= df[col].notna() & (df[col].astype(str).str.strip() != "")
        if bad.any():
            n = int(bad.to_numpy().argmax())
            kind = "a positive integer" if whole else "a number > 0"
            x = df[col].iloc[n]
            shown = repr(x) if isinstance(x, str) else str(x)
            raise ValueError(f"{csv.name} data row {df.index[n] + 1}: {col}={shown} must be {kind}")
    for col in ("model", "engine", "precision"):
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            raise ValueError(
                f"{csv.name} data row {df.index[int(bad.to_numpy().argmax())] + 1}: {col} is empty"
            )
    validation_columns.check_optional(df, csv)


def base_overrides(
    row, static: bool = False, engines=None, fp8_checkpoint: Optional[str] = None
) -> List[str]:
    """Overrides that pick the design of a row (composed once per distinct design). An `fp8` row
    runs the model file's `fp8_checkpoint` (block: fp8_block GEMMs), or `fp8_checkpoint` where the
    user's overrides set `model.fp8_checkpoint`."""
    prec = str(row["precision"]).lower()
    if prec not in PRECISIONS:
        raise ValueError(f"precision {prec!r} is not one of: {', '.join(PRECISIONS)}")
    w, kv = PRECISIONS[prec]
    if isinstance(row.get("kv_dtype"), str) and row["kv_dtype"]:  # its launch's (aic_recipes.kv_of)
        kv = row["kv_dtype"]
    model = model_config_name(str(row["model"]))
    if prec == "fp8" and (fp8_checkpoint or _model_yaml(model).get("fp8_checkpoint")) == "block":
        w = "fp8_block"
    system = row_system(row)
    version = row_version(row)
    release = row_release(row)
    tp = int(row["tp"])
    par, chips, stages = parallel_overrides(row, tp)
    return [
        f"model={model}",
        f"engine={launch_file(row) or engine_config_name(str(row['engine']), version, engines)}",
        f"hardware={system}",
        f"hardware.n_chips={chips * stages}",
        f"hardware.tensor_parallel={chips}",
        *par,
        "workload=decode" if static else "workload=closed_loop",
        f"workload.weight_dtype={w}",
        f"workload.kv_dtype={kv}",
        "workload.act_dtype=bf16",
        *([f"engine.moe_mxfp4={MXFP4_ACTIVATIONS[prec]}"] if prec in MXFP4_ACTIVATIONS else []),
        *launch_overrides(row),  # how the row was launched (aic_mapping.yaml `launches`)
        *([f"engine.version={release}"] if release else []),  # its release's kernel tables
        *(pool_overrides(row, bool(_model_yaml(model).get("n_experts"))) if is_disagg(row) else []),
    ]


def row_release(row) -> str:
    """The engine release a row ran (engine.version: its kernel tables, opcost/versions.py): an AIConfigurator
    row's `engine_release` (aic_rows: not a Dynamo image's version), another row's engine_version, where that
    is a release (PEP 440); else ""."""
    v = row.get("engine_release", row_version(row))
    v = v.strip() if isinstance(v, str) else ""
    return v if version_of(v) is not None else ""


def row_system(row) -> str:
    """conf/hardware/<name>.yaml a row runs on: its `system` column, else h100_sxm (the shipped rows)."""
    system = row.get("system", "")
    return hardware_config_name(system) if isinstance(system, str) and system.strip() else "h100_sxm"


def _given(row, col: str) -> bool:
    v = row.get(col)
    return v is not None and not (isinstance(v, float) and v != v) and str(v).strip() != ""


def parallel_overrides(row, tp: int) -> Tuple[List[str], int, int]:
    """Optional parallelism columns beyond `tp` (AIConfigurator's names): `pp` pipeline stages,
    `dp` data-parallel attention groups (the replica spans tp x dp GPUs, attention in dp groups of
    tp), `ep` / `moe_ep` expert parallelism over them (experts over moe_ep groups, each expert's
    columns split over the `moe_tp` = tp x dp / moe_ep GPUs of its group: hardware.moe_ep). A value
    of 1 or an empty cell changes nothing; one the model cannot map is a ValueError naming it.
    Returns (overrides, GPUs of a pipeline stage, stages)."""
    out = []
    vals = {col: int(float(row[col])) for col in PARALLEL_COLUMNS if _given(row, col)}  # check_rows'd
    chips = tp * vals.get("dp", 1)
    if vals.get("pp", 1) > 1:
        out.append(f"hardware.pipeline_parallel={vals['pp']}")
    if vals.get("dp", 1) > 1:
        out.append(f"hardware.attention_dp={vals['dp']}")
    ep = max(vals.get("ep", 1), vals.get("moe_ep", 1))
    moe_tp = vals.get("moe_tp", chips // ep if ep > 1 else chips)
    if moe_tp * ep != chips:
        raise ValueError(f"moe_tp={moe_tp} x ep={ep} must be tp x dp = {chips} GPUs")
    if ep > 1:
        out += ["hardware.moe_mapping=ep"] + ([f"hardware.moe_ep={ep}"] if moe_tp > 1 else [])
    return out, chips, vals.get("pp", 1)


def aic_columns(df):
    """The CSV with AIConfigurator's column names (ALIASES) under decodelab's, where it lacks
    decodelab's; `precision` from the quant-mode columns when it has none."""
    df = df.rename(columns={a: c for a, c in ALIASES.items() if a in df.columns and c not in df.columns})
    if "precision" not in df.columns and "gemm_quant_mode" in df.columns:
        prec = df["gemm_quant_mode"]
        if "moe_quant_mode" in df.columns:
            moe = df["moe_quant_mode"]
            prec = moe.where(moe.notna() & (moe.astype(str).str.strip() != ""), prec)
        df = df.assign(precision=prec)
    return df


def _unmapped_mode(row) -> str:
    """Why a row of a `mode` column is not an aggregated serving row ('' when it is)."""
    mode = row.get("mode", "")
    mode = "" if mode is None or (isinstance(mode, float) and mode != mode) else str(mode).strip().lower()
    if mode in AGG_MODES:
        return ""
    return (
        f"mode={mode}: validate maps aggregated serving rows (mode agg: one engine serves prefill and "
        "decode) only; a disaggregated row's prefill and decode pools are not mapped"
    )


def _frame(csv: Path):
    """(the CSV's rows in decodelab's columns, per row '' or the reason it is not run, whether a
    row's engine without a config is refused (AIConfigurator's schema) rather than an error)."""
    import pandas as pd

    if aic_rows.is_aic(csv):
        df = aic_rows.frame(csv, aic_candidates.expand_all)  # open launches: one row per candidate
        if df.empty:
            raise ValueError(f"{csv.name} has a header but no data rows")
        return df, list(df["refuse"]), True
    try:
        df = pd.read_csv(csv, comment="#")
    except pd.errors.EmptyDataError:
        raise ValueError(f"{csv.name} is empty (needs the columns {', '.join(COLUMNS)})")
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ValueError(f"{csv.name} is not a readable CSV ({type(e).__name__})")
    df = validation_columns.named_launches(aic_columns(df), csv)
    modes = [_unmapped_mode(row) for _, row in df.iterrows()] if "mode" in df.columns else [""] * len(df)
    return df, modes, False


def read_rows(csv: Path, static: bool = False, fp8_checkpoint: Optional[str] = None):
    """(the CSV as a DataFrame, its items (row number, design key, row) for
    validation_predict.predict_rows); a bad file, column or value is one ValueError naming it, as
    is a row whose engine has no config (in AIConfigurator's schema: a refused row). A row the model
    cannot express (its model, chip, precision, parallel split or mode has no config or mapping) is
    an item with the key (UNMAPPED, reason): recorded with that reason, not predicted; when no row
    can be expressed, the first reason is the error."""
    df, modes, lenient = _frame(csv)
    if len(df) and all(modes):
        raise ValueError(f"{csv.name} data row 1: {modes[0]}")
    check_rows(df[[not m for m in modes]] if any(modes) else df, csv)
    items, engines, first = [], engine_table(), None
    for n, ((_, row), why) in enumerate(zip(df.iterrows(), modes), start=1):
        if not why:
            try:
                engine_config_name(str(row["engine"]), row_version(row), engines)
            except ValueError as e:
                if not lenient:
                    raise ValueError(f"{csv.name} data row {n}: {e}")
                why = str(e)
        if not why:
            try:
                items.append((n, tuple(base_overrides(row, static, engines, fp8_checkpoint)), row))
                continue
            except ValueError as e:
                why = str(e)
        first = first or (n, why)
        items.append((n, (UNMAPPED, why), row))
    if first is not None and all(key[0] == UNMAPPED for _, key, _ in items):
        raise ValueError(f"{csv.name} data row {first[0]}: {first[1]}")
    return df, items


def run_validations(
    csvs: List[Path],
    overrides: Optional[List[str]] = None,
    static: bool = False,
    launch: str = "auto",
    jobs: int = 1,
):
    """Predicted vs measured per row, one pandas DataFrame per CSV (in one pass over all their
    rows). `overrides` (Hydra syntax) apply to every row; a workload or engine field they name is
    not replaced by the row's value. `jobs` > 1: the designs are evaluated in that many local
    worker processes (the same tables)."""
    import pandas as pd

    if launch not in LAUNCHES:
        raise ValueError(f"launch={launch!r} is not one of: {', '.join(LAUNCHES)}")
    # the checkpoint an fp8 row runs: the model file's, or the user's model.fp8_checkpoint
    ckpt = next(
        (o.split("=", 1)[1] for o in reversed(overrides or []) if o.startswith("model.fp8_checkpoint=")), None
    )
    items = []
    for i, csv in enumerate(csvs):
        items += [((i, n), key, row) for n, key, row in read_rows(csv, static, ckpt)[1]]
    recs = predict_rows(items, list(overrides or []), static, launch, jobs)
    out = []
    for i in range(len(csvs)):
        df = pd.DataFrame(
            [{**r, "row": r.get("row", num[1])} for (num, _, _), r in zip(items, recs) if num[0] == i]
        )
        df = aic_candidates.combine(df)  # a row run as several candidate launches: their mean
        df["engine_map"] = engine_maps(df)
        for k in (
            INT_COLUMNS
        ):  # whole numbers (a column with empty cells, e.g. disaggregated rows', reads as floats)
            df[k] = pd.to_numeric(df[k], errors="coerce").astype("Int64")
        out.append(df)
    return out


def run_validation(
    csv: Path,
    overrides: Optional[List[str]] = None,
    static: bool = False,
    launch: str = "auto",
    jobs: int = 1,
):
    """Predicted vs measured per row of one CSV (a pandas DataFrame): run_validations([csv], ...)."""
    return run_validations([csv], overrides, static, launch, jobs)[0]


def mape(df, key: str) -> float:
    """Mean absolute percentage error of `key` (ttft, tpot or tput: output tokens per second,
    validation_steps.output_rate) over the rows."""
    return float(df[f"{key}_err_pct"].abs().mean())


def bias(df, key: str) -> float:
    """Mean signed percentage error (predicted / measured - 1) of `key` over the rows."""
    return float(df[f"{key}_err_pct"].mean())


def summary(df, groups=GROUPS):
    """One row per group value (and `all`): rows, MAPE, bias and worst ratio of TPOT, TTFT and the
    output rate they imply (tput)."""
    import numpy as np
    import pandas as pd

    def stats(d, group, value):
        out = {"group": group, "value": str(value), "rows": len(d)}
        for k in ("tpot", "ttft", "tput"):
            ratio = d[f"{k}_pred"] / d[f"{k}_meas"]
            out[f"{k}_mape"] = mape(d, k)
            out[f"{k}_bias"] = bias(d, k)
            worst = np.maximum(ratio, 1.0 / ratio).dropna()  # rows with no prediction: not counted
            out[f"{k}_worst_x"] = float(worst.max()) if len(worst) else np.nan
        return out

    recs = [stats(df, "all", "all")]
    for g in groups:
        for v, d in df.groupby(g, sort=True):
            recs.append(stats(d, g, v))
    return pd.DataFrame(recs)


LAUNCH_WORDS = {"aic": "AIConfigurator's launch rules", "defaults": "the engine files' defaults"}


def launch_notes(df) -> List[str]:
    """One line per launch the table's rows ran with (`launch` column), naming the engines and
    versions of each: which rows AIConfigurator's rules set and which kept their engine files."""
    if "launch" not in df.columns:
        return []
    out = []
    for launch, g in df[df["launch"] != ""].groupby("launch", sort=True):
        names = sorted({f"{e} {v}".strip() for e, v in zip(g["engine"], g["engine_version"])})
        rows = f"{len(g)} row" + ("s" if len(g) != 1 else "")
        out.append(f"{rows} ran with {LAUNCH_WORDS.get(launch, launch)}: {', '.join(names)}")
    return out
