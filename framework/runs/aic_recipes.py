"""Pool sizes of disaggregated rows that do not record them, from the recipes their benchmark ran
(framework/runs/aic_rows.py disagg_of; the rule and its sources: framework/data/validation/
aic_mapping.yaml `disagg_recipes`, the recipes: its `file`, SemiAnalysis InferenceX's Dynamo
disaggregated DeepSeek-R1 recipes as its nvidia-master.yaml stated them over time).

- `applies`: the row's silicon_data_source names a dump of `disagg_recipes.markers`;
- `matches`: the recipes of the row's system, backend, precision, isl, osl whose conc-list holds its
  silicon_concurrency (the file's stated clients where `clients` lists it) and whose image its
  backend_version (the image the row names, where one matches it exactly), stated at its measured= time;
- `pools_of`: (the pools as disagg_of's columns and the clients, '' or the one line why not), among
  the recipes of the pools the same run's twin row records where one does;
- `draft_tokens`: an MTP recipe's draft length per pool (`mtp_layers_in_name`, `mtp_steps`);
- `prefill_step`: the tokens and prompts one prefill step of one attention rank carries (`prefill_step`);
- `pool_backends`: each pool's MoE backend, block-scaled FP8 GEMM kernel and fused all-reduce + norm
  its recipes state (`moe_backend`, `gemm_backend_fp8_block`, `allreduce_norm`); `recorded_settings`:
  those, the prefill step and the decode batch cap for a row that records its pools;
- `kv_of`: the KV cache dtype the recipes of a backend on a chip ran (`kv_dtype`)."""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from decodelab.paths import VALIDATION_DIR
from decodelab.runs.aic_mapping import cell, mapping, stated_clients

MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\dT[\d:.]+Z)")
IMAGE = re.compile(r"image=([^;]+)")
DATE_ONLY = "T00:00:00.000Z"  # a db-dump copy's time: the UTC day only
REFUSED = "mode=disagg"


def _rule() -> dict:
    return mapping().get("disagg_recipes") or {}


@functools.lru_cache(maxsize=None)
def recipes() -> tuple:
    """The recipes of `disagg_recipes.file`, each with its window as UTC datetimes (`t0`, `t1`)."""
    import yaml

    rule = _rule()
    if not rule.get("file"):
        return ()
    entries = yaml.safe_load((Path(VALIDATION_DIR) / rule["file"]).read_text()) or []
    return tuple(
        {**e, "t0": _utc(e["since"]), "t1": _utc(e["until"]) if e["until"] else None} for e in entries
    )


def _utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def applies(row) -> bool:
    source = cell(row, "silicon_data_source")
    return any(m in source for m in _rule().get("markers") or [])


def exact_time(source: str) -> Optional[str]:
    """The measured= time a silicon_data_source states to the second; None where it states the UTC
    day only (DATE_ONLY) or no time."""
    m = MEASURED.search(source)
    return m.group(1) if m and not m.group(1).endswith(DATE_ONLY) else None


def _window(source: str) -> Optional[Tuple[dt.datetime, dt.datetime]]:
    """(first, last) time the row may have been measured: its measured= time, or its UTC day."""
    m = MEASURED.search(source)
    if not m:
        return None
    t = _utc(m.group(1))
    return (t, t + dt.timedelta(days=1)) if m.group(1).endswith(DATE_ONLY) else (t, t)


def _runs(e: dict, clients: int) -> bool:
    """Whether recipe `e`'s benchmark ran `clients` clients: its file's stated count (`clients`),
    else its conc-list."""
    stated = (_rule().get("clients") or {}).get(e["config_file"])
    return clients == stated if stated is not None else clients in e["conc"]


def matches(row, clients: int) -> List[dict]:
    """The recipes a row may have run (module docstring)."""
    source = cell(row, "silicon_data_source")
    window = _window(source)
    if window is None:
        return []
    first, last = window
    fields = {k: cell(row, k) for k in ("system", "backend", "precision", "isl", "osl", "backend_version")}
    models = _rule().get("models") or {}  # a recipe's model-prefix -> a text of the model_path it serves
    not_models = _rule().get("models_not") or {}
    path = cell(row, "model_path").lower()
    found = [
        e
        for e in recipes()
        if (e["system"], e["backend"], e["precision"])
        == (fields["system"], fields["backend"], fields["precision"])
        and str(models.get(e.get("model", ""), "")).lower() in path
        and not any(str(x).lower() in path for x in not_models.get(e.get("model", ""), ()))
        and (str(e["isl"]), str(e["osl"])) == (fields["isl"], fields["osl"])
        and _runs(e, clients)
        and fields["backend_version"] in e["image"]
        and e["t0"] <= last
        and (e["t1"] is None or e["t1"] > first)
    ]
    m = IMAGE.search(source)  # the image the run names: a key whose image is exactly it ran
    image = m.group(1).strip().replace("#", "/") if m else ""
    exact = [e for e in found if e["image"] == image]
    return exact or found


def _pools(e: dict) -> tuple:
    """A recipe's pools, comparable across recipes."""
    return tuple(tuple(sorted(e[side].items())) for side in ("prefill", "decode"))


def _columns(e: dict, clients: int) -> Dict[str, int]:
    """A recipe's pools as disagg_of's columns (aic_mapping.yaml `disagg_recipes`)."""
    out: Dict[str, int] = {}
    for side in ("prefill", "decode"):
        p = e[side]
        tp, dp = (1, p["tp"]) if p["dp_attn"] else (p["tp"], 1)
        out.update(
            {
                f"{side}_workers": p["workers"],
                f"{side}_tp": tp,
                f"{side}_pp": 1,
                f"{side}_dp": dp,
                f"{side}_moe_tp": p["tp"] // p["ep"],
                f"{side}_moe_ep": p["ep"],
            }
        )
    ranks = out["decode_workers"] * out["decode_dp"]
    step = prefill_step(e)
    out["prefill_batch"], out["prefill_tokens"] = step.get("batch", 0), step.get("tokens", 0)
    stated = (_rule().get("decode_batch") or {}).get(e["config_file"])  # the file's, where its name misleads
    out["decode_batch"] = stated or e["decode"].get("batch") or math.ceil(clients / ranks)
    return out


def by_directory(key: str, e: dict) -> dict:
    """The entry of aic_mapping.yaml `disagg_recipes.<key>` (keyed by recipe directory) for the
    first directory recipe `e`'s file lies in; {} = none stated."""
    name = e["config_file"] or ""
    stated = _rule().get(key) or {}
    return dict(next((v for d, v in stated.items() if name.startswith(d)), {}))


def prefill_step(e: dict) -> Dict[str, int]:
    """One prefill step of one attention rank under recipe `e`: {"tokens", "batch"} of its
    `prefill_step` directory (by_directory); {} = not stated."""
    return by_directory("prefill_step", e)


def draft_tokens(e: dict) -> Optional[Dict[str, int]]:
    """The draft tokens per step (`<side>_mtp`) each pool of recipe `e` runs: 0 without MTP; the
    SGLang file's `mtp_steps`, the TensorRT-LLM file name's `mtp_layers_in_name`; None when an MTP
    recipe's is not known (aic_mapping.yaml `disagg_recipes`)."""
    if not e["mtp"]:
        return {"prefill_mtp": 0, "decode_mtp": 0}
    rule, name = _rule(), e["config_file"] or ""
    stated = (rule.get("mtp_steps") or {}).get(name)
    if stated is not None:
        return {f"{side}_mtp": int(stated.get(side, 0)) for side in ("prefill", "decode")}
    pattern = (rule.get("mtp_layers_in_name") or {}).get(e["backend"])
    m = re.search(pattern, name) if pattern else None
    return {"prefill_mtp": int(m.group(1)), "decode_mtp": int(m.group(1))} if m else None


def _name(e: dict) -> str:
    return f"{e['key']}@{e['commit']} {e['config_file'] or 'conc ' + str(e['conc'])}"


POOL_COLUMNS = [
    f"{s}_{k}" for s in ("prefill", "decode") for k in ("workers", "tp", "dp", "moe_tp", "moe_ep")
]
# the batch caps a row that records its pools takes from its recipes (recorded_settings)
CAPS = ("prefill_batch", "prefill_tokens", "decode_batch")


def of_pools(found: List[dict], clients: int, pools: Dict[str, int]) -> List[dict]:
    """The recipes of `found` whose pools are `pools` (disagg_of's columns)."""
    return [e for e in found if all(_columns(e, clients)[k] == pools.get(k) for k in POOL_COLUMNS)]


def pools_of(row, twin: Optional[Dict[str, int]] = None) -> Tuple[Dict[str, int], str]:
    """(the pools as disagg_of's columns with `concurrency`, '' or the one line why not run);
    `twin`: the pools the same run's recorded row states, which narrow the recipes to theirs."""
    clients = stated_clients(row)
    if clients is None:
        return {}, f"{REFUSED} pools not recorded: no silicon_concurrency to match a recipe by"
    found = _found(row, clients, twin)
    what = (
        f"{cell(row, 'system')} {cell(row, 'backend')} {cell(row, 'backend_version')} "
        f"{cell(row, 'precision')} {cell(row, 'isl')}/{cell(row, 'osl')} c{clients}"
    )
    if not found:
        return (
            {},
            f"{REFUSED} no recipe: no InferenceX recipe of {what} at its measured time (aic_mapping.yaml disagg_recipes)",
        )
    if len({_pools(e) for e in found}) > 1:
        names = "; ".join(_name(e) for e in found)
        return {}, f"{REFUSED} ambiguous recipe: {what} matches recipes with different pools: {names}"
    if len({e["mtp"] for e in found}) > 1:
        return (
            {},
            f"{REFUSED} MTP or not: {what} matches MTP and non-MTP recipes of the same pools ({_name(found[0])})",
        )
    drafts = [draft_tokens(e) for e in found]
    if None in drafts or any(d != drafts[0] for d in drafts):
        return (
            {},
            f"{REFUSED} MTP recipe: {what} ran {_name(found[0])}: its draft length per pool is not known "
            "(aic_mapping.yaml disagg_recipes mtp_steps)",
        )
    return _launch(row, found, drafts[0], clients), ""


def _found(row, clients: int, twin: Optional[Dict[str, int]]) -> List[dict]:
    """The recipes a row of `clients` may have run, narrowed to its twin's pools where one holds them
    and, as the twin (a recorded row, the same measurement) is read, to those without MTP where one is
    (recorded_settings)."""
    found = matches(row, clients)
    same = of_pools(found, clients, twin) if twin else []
    return [e for e in same if not e["mtp"]] or same or found


def _launch(row, found: List[dict], drafts: Dict[str, int], clients: int) -> Dict[str, object]:
    """pools_of's columns of one launch: recipes `found` of the same pools and MTP, their `drafts`."""
    columns = {**_columns(found[0], clients), **drafts, **pool_backends(found), **mem_fractions(found)}
    return {**columns, "recipe": files(found), **kv_of(row), "concurrency": clients}


def candidates(row, twin: Optional[Dict[str, int]] = None) -> List[Dict[str, object]]:
    """Where pools_of finds several launches a row may have run (recipes of different pools, or of
    the same pools with and without MTP): pools_of's columns of each distinct one (its recipes' files
    in `recipe`), for validate to run them all and report their mean; [] when pools_of settles the
    row or a candidate's draft length is not known."""
    clients = stated_clients(row)
    found = _found(row, clients, twin) if clients is not None else []
    groups: Dict[tuple, List[dict]] = {}
    for e in found:
        groups.setdefault((_pools(e), e["mtp"]), []).append(e)
    drafts = [[draft_tokens(e) for e in g] for g in groups.values()]
    if len(groups) < 2 or any(None in d or any(x != d[0] for x in d) for d in drafts):
        return []
    return [_launch(row, g, d[0], clients) for g, d in zip(groups.values(), drafts)]


def files(found: List[dict]) -> str:
    """The recipe files of `found`, once each in order (the rows CSV's `recipe`)."""
    return "; ".join(dict.fromkeys(e["config_file"] or f"{e['key']} conc-list" for e in found))


def mem_fractions(found: List[dict]) -> Dict[str, float]:
    """{"prefill_mem_fraction", "decode_mem_fraction"}: the share of the GPU each pool's engine takes
    for weights and KV as the recipe files of `found` state it (aic_mapping.yaml
    `disagg_recipes.mem_fraction`), each where every file states the same one; {} else."""
    stated = _rule().get("mem_fraction") or {}
    out: Dict[str, float] = {}
    for side in ("prefill", "decode"):
        seen = {(stated.get(e["config_file"]) or {}).get(side) for e in found}
        if len(seen) == 1 and None not in seen:
            out[f"{side}_mem_fraction"] = float(seen.pop())
    return out


# disagg_recipes maps of a pool's kernels
BACKENDS = ("moe_backend", "gemm_backend_fp8_block", "allreduce_norm")


def pool_backends(found: List[dict]) -> Dict[str, str]:
    """{"prefill_moe_backend", "decode_moe_backend", "prefill_gemm_backend_fp8_block", ...}: the MoE
    backend, the block-scaled FP8 GEMM kernel and the fused all-reduce + norm kernel each pool of the
    recipes `found` runs (aic_mapping.yaml `disagg_recipes.<key>`, by the first directory a file lies
    in; the decode pool's by its attention DP), each where every recipe of `found` states the same
    one; a pool without (none stated, or they differ) keeps the engine file's."""
    out: Dict[str, str] = {}
    for key in BACKENDS:
        seen: Dict[str, set] = {"prefill": set(), "decode": set()}
        for e in found:
            pools = by_directory(key, e)
            seen["prefill"].add(pools.get("prefill", ""))
            seen["decode"].add(pools.get("decode_attention_dp" if e["decode"]["dp_attn"] else "decode", ""))
        out.update({f"{side}_{key}": v.pop() for side, v in seen.items() if len(v) == 1 and "" not in v})
    return out


def recorded_settings(row, pools: Dict[str, int]) -> Dict[str, object]:
    """What a row that records its pools (aic_rows.disagg_of's `pools`) takes from the recipes it
    may have run (`matches`) whose pools are those and that run no MTP (a recorded row runs
    without): each pool's MoE backend (pool_backends) and the batch caps a row without pools reads
    from them (`_columns`: the prefill step their directory states, 0 = the engine's where none is,
    and the decode batch their files state), where every such recipe gives the same. The dumps'
    batch sizes are fill-ins, not caps: prefill_batch_size is 1 in every db-dump row and
    decode_batch_size its clients over the decode ranks (180 clients on five decode workers of
    batch32 recipes record 36). {} where none matches."""
    clients = stated_clients(row)
    found = matches(row, clients) if clients is not None else []
    found = [e for e in of_pools(found, clients, pools) if not e["mtp"]]
    out: Dict[str, object] = (
        {**pool_backends(found), **mem_fractions(found), "recipe": files(found)} if found else {}
    )
    caps = {tuple(_columns(e, clients)[k] for k in CAPS) for e in found}
    if len(caps) == 1:
        out.update(zip(CAPS, caps.pop()))
    return out


def kv_of(row) -> Dict[str, str]:
    """{"kv_dtype": the KV cache dtype the row's backend's recipes on its chip ran}, where
    `disagg_recipes.kv_dtype` states one (not the row's precision's); else {}."""
    kv = ((_rule().get("kv_dtype") or {}).get(cell(row, "backend")) or {}).get(cell(row, "system"))
    return {"kv_dtype": str(kv)} if kv else {}
