"""AIConfigurator's silicon_sample.csv schema read as decodelab validate rows (docs/validation.md
"Reading AIConfigurator's silicon rows"): each row becomes decodelab's columns (model, engine,
engine_version, system, precision, tp, pp, dp, moe_tp, moe_ep, isl, osl, concurrency, ttft_ms,
tpot_ms) plus `refuse`, the one-line reason a row is not run ('' = it runs), how it was launched
(aic_launches.launch_of: aic_mapping.yaml `launches`) and the benchmark client that measured it (aic_clients.py:
length draw, requests and warm-ups per client, `ttft_ok`).

The schema's quirks, each handled here:
- `#` inside a field (`silicon_data_source` holds image names like `nvcr.io#nvidia/...`): only whole
  lines starting with `#` are comments, never the rest of a line;
- an empty `precision` is BF16 (the checkpoint's own dtype);
- `moe_tp_size` / `moe_ep_size` filled on dense models (even `moe_ep_size` 0): ignored there;
- `batch_size` is counted per attention-DP rank: the clients are batch_size x attention_dp_size, or
  the `silicon_concurrency=N` that `silicon_data_source` records (the benchmark's client count);
  when both are given and differ the parallel split is ambiguous and the row is refused;
- a replica is tp_size x attention_dp_size GPUs per pipeline stage (x pp_size), its experts split
  moe_tp_size x moe_ep_size ways over them (moe_tp x moe_ep = tp x attention_dp);
- a disaggregated row (`mode` disagg) has empty tp/batch columns and `prefill_*` / `decode_*` pool
  columns instead (disagg_of): run as conf/disagg pools (framework/runs/validation_disagg.py);
- one measurement dumped two or three times, its times printed a digit apart, each copy stating part
  of what is known (the time to the second, the config_id, the pools): read as one (same_run, twin_key)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Dict, Tuple

from decodelab.runs import aic_parallel, aic_recipes
from decodelab.runs.aic_clients import client_of, not_as_stated
from decodelab.runs.aic_launches import launch_of
from decodelab.runs.aic_mapping import cell, mapping, stated_clients
from decodelab.runs.validation_names import _model_yaml, model_config_name

# The column that marks the schema (AIConfigurator's measured TPOT)
MARK = "silicon_tpot_ms"
POOL_KEYS = (
    "batch_size",
    "num_workers",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
)
# Refusal kinds (the text before the first ': ' of a reason), counted on the console
DISAGG = "mode=disagg"


def is_aic(csv: Path) -> bool:
    """Whether the CSV's header (its first line not starting with `#`) is AIConfigurator's schema."""
    with open(csv, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip() and not line.lstrip().startswith("#"):
                return MARK in [c.strip() for c in line.strip().split(",")]
    return False


def read_csv(csv: Path):
    """The CSV as text cells: whole lines starting with `#` dropped, a `#` inside a field kept."""
    import pandas as pd

    with open(csv, encoding="utf-8") as f:
        text = "".join(line for line in f if not line.lstrip().startswith("#"))
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)


def number(row, col: str):
    """A numeric cell as float, or None when empty or not a number."""
    try:
        return float(cell(row, col))
    except ValueError:
        return None


def whole(row, col: str, default=None):
    v = number(row, col)
    return default if v is None else int(v)


def pool(row, side: str) -> str:
    """A disaggregated row's pool, e.g. `2 x (tp 8, adp 1, moe 1x8, batch 16)`."""
    v = {k: whole(row, f"{side}_{k}") for k in POOL_KEYS}
    workers = "?" if v["num_workers"] is None else v["num_workers"]
    batch = "?" if v["batch_size"] is None else v["batch_size"]
    return (
        f"{workers} x (tp {v['tp_size']}, adp {v['attention_dp_size']}, "
        f"moe {v['moe_tp_size']}x{v['moe_ep_size']}, batch {batch})"
    )


def pool_row(row, side: str) -> dict:
    """A disaggregated row's pool in an aggregated row's columns (tp_size, ..., for parallel_of); a
    moe column of 0 is not recorded (vLLM rows write 0 x 0: experts over all the pool's GPUs)."""
    out = {c: cell(row, c) for c in ("model_path", "backend")}
    for k in POOL_KEYS:
        v = cell(row, f"{side}_{k}")
        out[k] = "" if k.startswith("moe_") and v == "0" else v
    return out


# A measurement to the last digit: a row without pool sizes and a row that records them with the same
# key are one run dumped twice (the db-dump copies of InferenceX's runs record the pools). The dumps
# print one float apart in the 17th digit (13693.258112009305 and ...304 ms): 12 significant digits.
TWIN_KEY = ("system", "backend", "precision", "isl", "osl")
TWIN_TIMES = ("silicon_tpot_ms", "silicon_ttft_ms")


def twin_key(row) -> tuple:
    times = tuple(f"{v:.12g}" if (v := number(row, k)) is not None else "" for k in TWIN_TIMES)
    return (*(cell(row, k) for k in TWIN_KEY), *times, stated_clients(row))


def recorded(row) -> bool:
    """Whether a row records both pools' sizes (prefill/decode_num_workers and _batch_size)."""
    cols = [f"{s}_{k}" for s in ("prefill", "decode") for k in ("num_workers", "batch_size")]
    return None not in [whole(row, c) for c in cols]


def twin_pools(twin, model: str):
    """The pools a row's twin (TWIN_KEY) records, as disagg_of's columns, or None."""
    if twin is None:
        return None
    pools, why = disagg_of(twin, model)
    return None if why else pools


def disagg_of(row, model: str, twin=None) -> Tuple[Dict[str, int], str]:
    """(a disaggregated row's pools as columns `<side>_workers`, `_tp`, `_pp`, `_dp`, `_moe_tp`,
    `_moe_ep`, `_batch`, and its clients; '' or the one line why it is not run): each pool's split
    read as an aggregated replica's (parallel_of; a worker may span nodes), no pipeline stages, and
    the clients = decode workers x attention DP x decode batch size (the recorded
    silicon_concurrency where given must agree). Rows of a `disagg_recipes` dump without pool sizes
    take their benchmark recipe's pools (aic_recipes.pools_of; among those of the pools `twin`, the
    same run's row that records them, holds where one does)."""
    desc = f"prefill {pool(row, 'prefill')}, decode {pool(row, 'decode')}"
    if not recorded(row) and aic_recipes.applies(row):  # the benchmark's recipe (aic_mapping.yaml)
        return aic_recipes.pools_of(row, twin_pools(twin, model))
    if not recorded(row):
        return {}, (
            f"{DISAGG} pools not recorded: {desc}: the pool sizes (prefill/decode_num_workers, "
            "_batch_size) are empty (AIConfigurator's cli_estimate needs them too)"
        )
    out: Dict[str, int] = {}
    for side in ("prefill", "decode"):
        # a worker may span NVLink domains: the hardware's nvlink_domain / scale_out_bw_gb_s cost its
        # collectives (parallel_of's one-domain rule is for aggregated replicas, system "" skips it)
        par, why = parallel_of(pool_row(row, side), model, "")
        if not why and par["pp"] > 1:
            why = f"pipeline stages: pp_size {par['pp']} (pools of tensor parallelism and attention DP only)"
        if why:
            return out, f"{DISAGG} {side} pool {why}; {desc}"
        out.update({f"{side}_{k}": v for k, v in par.items()})
        out.update(
            {
                f"{side}_workers": whole(row, f"{side}_num_workers"),
                f"{side}_batch": whole(row, f"{side}_batch_size"),
            }
        )
    clients = out["decode_workers"] * out["decode_dp"] * out["decode_batch"]
    stated = stated_clients(row)
    if stated is not None and stated != clients:
        return out, (
            f"{DISAGG} ambiguous concurrency: decode workers x attention DP x batch = {clients} clients, "
            f"but silicon_data_source records silicon_concurrency={stated}; {desc}"
        )
    return {
        **out,
        **aic_recipes.recorded_settings(row, out),
        **aic_recipes.kv_of(row),
        "concurrency": clients,
    }, ""


def family_reason(model_path: str) -> str:
    """Why a model's family cannot be expressed ('' when it can): aic_mapping.yaml's list."""
    name = model_path.lower().split("/")[-1]
    for fam in mapping().get("unsupported_families") or []:
        if str(fam["match"]).lower() in name:
            return f"model family not modelled: {model_path}: {fam['why']}"
    return ""


def precision_of(row, model: str) -> str:
    """The row's precision: empty = bf16; `fp4` of a model (conf/model name, '' if none) whose 4-bit checkpoint is MXFP4
    (model.expert_only_dtypes lists mxfp4: gpt-oss, DeepSeek-V4) = mxfp4, nvfp4 for a checkpoint its model_path names
    NVFP4; without a `precision` column, the moe_quant_mode where given, else the gemm_quant_mode."""
    if "precision" not in row.keys():
        return cell(row, "moe_quant_mode") or cell(row, "gemm_quant_mode") or "bf16"
    prec = cell(row, "precision").lower()
    if not prec:
        return "bf16"
    if prec == "fp4" and model and "mxfp4" in (_model_yaml(model).get("expert_only_dtypes") or []):
        # nvidia's -NVFP4 checkpoints of a model whose own 4-bit one is MXFP4 (DeepSeek-V4) stay NVFP4
        return "nvfp4" if "nvfp4" in cell(row, "model_path").lower() else "mxfp4"
    return prec


def concurrency_of(row) -> Tuple[int, str]:
    """(clients, '' or the reason they are ambiguous): batch_size x attention_dp_size, checked against
    the silicon_concurrency that silicon_data_source records; the recorded one where the row's split
    is read as launched (aic_parallel: a twice-counted EP, an unrecorded attention-DP size)."""
    recorded = stated_clients(row)
    bs, adp = whole(row, "batch_size"), whole(row, "attention_dp_size", 1)
    per_rank = bs * adp if bs is not None else None
    if recorded is None and per_rank is None:
        return 0, "no concurrency: batch_size is empty and silicon_data_source records no silicon_concurrency"
    if recorded is not None and (aic_parallel.launched(row) or _unrecorded_dp(row, recorded)):
        return recorded, ""
    if recorded is not None and per_rank is not None and recorded != per_rank:
        return recorded, (
            f"ambiguous concurrency: batch_size {bs} x attention_dp_size {adp} = {per_rank} clients, but "
            f"silicon_data_source records silicon_concurrency={recorded}, and no attention-DP size of the "
            f"{whole(row, 'tp_size', 1) * adp} GPUs gives it (aic_mapping.yaml unrecorded_attention_dp)"
        )
    return (recorded if recorded is not None else per_rank), ""


def _unrecorded_dp(row, recorded):
    """aic_parallel.unrecorded_dp of the row, its model's experts read from conf/model."""
    model, _ = model_of(cell(row, "model_path"))
    is_moe = bool(model) and int(_model_yaml(model).get("n_experts") or 0) > 0
    return aic_parallel.unrecorded_dp(row, recorded, is_moe)


def parallel_of(row, model: str, system: str) -> Tuple[Dict[str, int], str]:
    """(decodelab's parallel columns, '' or why the split cannot be run): `tp` attention tensor
    parallelism, `dp` attention-DP groups (a stage is tp x dp GPUs), `pp` stages; `moe_tp` / `moe_ep`
    for MoE models only (ignored on dense ones, where the schema fills them anyway)."""
    tp, pp, adp = whole(row, "tp_size", 1), whole(row, "pp_size", 1), whole(row, "attention_dp_size", 1)
    is_moe = bool(model) and int(_model_yaml(model).get("n_experts") or 0) > 0
    # (tp, attention_dp, moe_tp, moe_ep) as launched, or None
    split = aic_parallel.launched(row) or aic_parallel.unified_tp(row, is_moe)
    dp = None if split else _unrecorded_dp(row, stated_clients(row))
    if split or dp:
        tp, adp = split[:2] if split else (1, dp)
    out = {"tp": tp, "pp": pp, "dp": adp}
    if min(tp, pp, adp) < 1:
        return out, f"bad parallel split: tp_size {tp}, pp_size {pp}, attention_dp_size {adp} must be >= 1"
    gpus, domain = tp * adp * pp, (mapping().get("nvlink_domain") or {}).get(system)
    if domain and gpus > domain:
        return out, (
            f"multi-node: tp_size {tp} x attention_dp_size {adp} x pp_size {pp} = {gpus} GPUs, more than "
            f"the {domain} of one {system} NVLink domain (validate keeps a replica in one domain: no row of "
            "a known source needs more; hardware.nvlink_domain, scale_out_bw_gb_s model the network)"
        )
    if not is_moe:
        return out, ""
    mtp, mep = split[2:] if split else (whole(row, "moe_tp_size", tp * adp), whole(row, "moe_ep_size", 1))
    if mtp * mep != tp * adp:
        return out, (
            f"inconsistent expert split: moe_tp_size {mtp} x moe_ep_size {mep} != tp_size {tp} x "
            f"attention_dp_size {adp} GPUs"
        )
    out.update(moe_tp=mtp, moe_ep=mep)
    return out, ""


def measured(row) -> Tuple[Dict[str, float], str]:
    """isl, osl, ttft_ms, tpot_ms as floats, and '' or the first one that is not a number > 0."""
    cols = {"isl": "isl", "osl": "osl", "ttft_ms": "silicon_ttft_ms", "tpot_ms": "silicon_tpot_ms"}
    out = {k: number(row, c) for k, c in cols.items()}
    bad = [c for k, c in cols.items() if not (out[k] or 0) > 0]
    out = {k: float("nan") if v is None else v for k, v in out.items()}
    return out, (f"bad measurement: {bad[0]}={cell(row, bad[0])!r} must be a number > 0" if bad else "")


def model_of(model_path: str) -> Tuple[str, str]:
    """(conf/model name or '', '' or why the model has none)."""
    why = family_reason(model_path)
    if why:
        return "", why
    try:
        return model_config_name(model_path), ""
    except ValueError as e:
        return "", str(e)


def engine_release(row) -> str:
    """The engine release an AIConfigurator row ran: its backend_version, "" where that is the version of the
    Dynamo runtime image it ran in (a Dynamo dump records the image's: `ai-dynamo/<engine>-runtime:<version>`
    in silicon_data_source)."""
    v, source = cell(row, "backend_version"), cell(row, "silicon_data_source")
    image = re.search(rf"ai-dynamo/[\w.-]*runtime:{re.escape(v)}(?![\w.])", source) if v else None
    return "" if image else v


def to_row(row, n: int, twins=None) -> dict:
    """decodelab's row (validation.COLUMNS and the parallel columns) of AIConfigurator row `n`
    (1-based data row of the CSV), with `refuse`: '' or the first reason it cannot run; `twins`:
    the table's rows that record their pools, by twin_key."""
    model_path, system = cell(row, "model_path"), cell(row, "system")
    conc, why_c = concurrency_of(row)
    meas, why_m = measured(row)
    mode = cell(row, "mode").lower() or "agg"
    model, why = model_of(model_path)
    out = {
        "row": n,
        "id": cell(row, "id"),
        "model": model_path,
        "engine": cell(row, "backend"),
        "engine_version": cell(row, "backend_version"),
        "engine_release": engine_release(row),
        "system": system or "h100_sxm",
        "mode": mode,
        "precision": precision_of(row, model),
        "concurrency": conc or float("nan"),
        **meas,
    }
    par, why_p = parallel_of(row, model, system) if model and mode == "agg" else ({}, "")
    out.update(par, **launch_of(row, par.get("tp", 1) * par.get("dp", 1), conc), **client_of(row))
    why_p = why_p or not_as_stated(row, par.get("tp", 1) * par.get("dp", 1), conc)
    if mode == "disagg":
        twin = (twins or {}).get(twin_key(row))
        pools, why_d = disagg_of(row, model, twin) if model else ({}, "")
        out.update(pools, tp=pools.get("decode_tp", float("nan")))
        why, why_c = why or why_d, ""
    elif mode != "agg":
        why = f"mode={mode}: validate maps aggregated serving rows (mode agg) only"
    out["refuse"] = why or why_m or why_c or why_p
    return out


def frame(csv: Path, expand=None):
    """The rows of an AIConfigurator CSV as decodelab's (to_row), one per data row, in order;
    `expand(recs, twins)`: the records the (record, row) pairs become instead, `twins` the rows that
    record their pools by twin_key (aic_candidates.expand_all)."""
    import pandas as pd

    rows = same_run(read_csv(csv).to_dict("records"))  # plain dicts: cell() reads each many times
    disagg = [r for r in rows if cell(r, "mode").lower() == "disagg" and recorded(r)]
    twins = {twin_key(r): r for r in disagg}
    recs = [(to_row(row, n, twins), row) for n, row in enumerate(rows, start=1)]
    return pd.DataFrame(expand(recs, twins) if expand else [rec for rec, _ in recs])


# the run's config a db-dump copy names, which its other copies lack (same_run)
CONFIG_ID = re.compile(r"config_id=\d+;")


def same_run(rows: list) -> list:
    """`rows` with what a copy of the same measurement (twin_key) states and a row lacks: the time
    to the second where the row has its UTC day only (a db-dump or 2026-04-06 copy), the run's
    config_id (a db-dump copy's); a row's own statements are kept."""
    copies: dict = {}
    for r in rows:
        copies.setdefault(twin_key(r), []).append(cell(r, "silicon_data_source"))
    return [_completed(r, copies[twin_key(r)]) for r in rows]


def _completed(row, sources: list):
    """Row `row` with its silicon_data_source completed from its copies' `sources` (same_run)."""
    own = new = cell(row, "silicon_data_source")
    day = aic_recipes.MEASURED.search(own)
    exact = [t for s in sources if (t := aic_recipes.exact_time(s))]
    if day and day.group(1).endswith(aic_recipes.DATE_ONLY) and exact and exact[0][:10] == day.group(1)[:10]:
        new = new.replace(day.group(1), exact[0])
    ids = [m.group(0) for s in sources if (m := CONFIG_ID.search(s))]
    if ids and not CONFIG_ID.search(new):
        new = f"{new}; {ids[0]}"
    if new == own:
        return row
    row = row.copy()
    row["silicon_data_source"] = new
    return row


def reason_kind(reason: str) -> str:
    """The kind of a reason, for counting: its text before the first ': ' (or ' ('), numbers as N."""
    head = re.split(r": | \(", str(reason), maxsplit=1)[0]
    return re.sub(r"\d+(\.\d+)?", "N", head).strip()


def refusals(df):
    """The rows of a validation table without a prediction: row, id, setting, status (`refused`: not
    run, read_rows; else the simulation's: infeasible, invalid), kind (reason_kind) and reason."""
    bad = df[df["status"] != "ok"]
    cols = [
        c for c in ("row", "id", "model", "system", "engine", "engine_version", "mode") if c in bad.columns
    ]
    out = bad[cols + ["reason"]].copy()
    status = ["refused" if not cfg else st for st, cfg in zip(bad["status"], bad["engine_config"])]
    out.insert(len(cols), "status", status)
    out.insert(len(cols) + 1, "kind", [reason_kind(r) for r in out["reason"]])
    return out


def refusal_counts(ref):
    """(status, kind, rows, first row, its reason) per kind of refusal, most rows first."""
    import pandas as pd

    recs = [
        {"status": st, "kind": kind, "rows": len(g), "row": g["row"].iloc[0], "reason": g["reason"].iloc[0]}
        for (st, kind), g in ref.groupby(["status", "kind"], sort=False)
    ]
    cols = ["status", "kind", "rows", "row", "reason"]
    return pd.DataFrame(recs, columns=cols).sort_values("rows", ascending=False, kind="stable")
