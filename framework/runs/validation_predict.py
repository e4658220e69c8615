"""The predictions of `decodelab validate` (framework/runs/validation.py reads and checks the rows):
one composed config per design, each row's workload (the benchmark client) and launch settings set
on it, evaluated in this process or spread over local worker processes (joblib/loky, `decodelab
validate -j N`).

The rows of one design (model, engine, system, precision, TP) form one chunk; a worker composes a
design once per `decodelab validate` call and keeps it for the chunks it gets, and the records come
back in the CSV's order whatever the order the chunks finish in, so the table is the same for any
number of workers."""

from __future__ import annotations

import re
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

from decodelab.config import compose as C
from decodelab.config.composition import compose_job, context_composer
from decodelab.core import profile_reserve
from decodelab.core.result import Result
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.dispatch import evaluate
from decodelab.modes.serving.simulate import evaluate_serving, serving_designs
from decodelab.runs.validation_disagg import is_disagg, pool_settings
from decodelab.runs.validation_steps import output_rate

# The collector (AIConfigurator's eval pipeline: genai-perf, later aiperf, with the same arguments):
# --request-count 10*c --warmup-request-count 2*c (aiconfigurator @961028348
# src/aiconfigurator/eval/benchmarks/genai_perf_runner.py:100-123; @c0a88170 :190-229)
REQUESTS_PER_CLIENT = 10
WARMUP_PER_CLIENT = 2
# The launch of AIConfigurator's measurement pipeline (`aiconfigurator eval`: its generator writes the
# engine's launch config, starts the service from it and benchmarks it) per engine family: the first
# version that pipeline can only have launched with its generator's rules (launch_engine below), ""
# = every version. TensorRT-LLM: the engine file already is AIConfigurator's generated launch config
# for the measured version (conf/engine/default.yaml: KV fraction, CUDA-graph sizes and overlap from
# aiconfigurator @961028348 cli/backends/trtllm.py:108-116 and extra_engine_args.1.0.0rc3.yaml.j2), so
# its rows take the same generator's max_num_tokens rule too: one launch config, not half of one.
# vLLM: the generator passed --max-num-batched-tokens from 2026-01-08 (ai-dynamo/aiconfigurator #238).
# The pipeline serves through Dynamo (its eval copies the generated configs into Dynamo's backend
# folder), whose releases pin one engine version each: vLLM 0.12.0 is the pin of Dynamo v0.8.0 (its
# release branch 2026-01-13, ai-dynamo/dynamo #5349 / #5402), v0.8.1 (#5590) and v0.8.1.post3 (#5932,
# 2026-02-04), all after that rule; v0.7.0 (2025-11-24, #4550) pinned vLLM 0.11.0, before the
# generator served vLLM at all (#144, 2025-12-04); the generator and eval pipeline were aligned with
# Dynamo 0.8.0 on 2026-01-24 (aiconfigurator #278). So rows from vLLM 0.12.0 on take the rule (Dynamo
# main carried 0.12.0 from 2025-12-03, #4736, so a December run without it cannot be excluded:
# docs/journal/2026-11-27-validation-how-rows-run.md). SGLang: it passed --enable-mixed-chunk from 2026-01-19 (#257, #258); Dynamo
# v0.8.0 / v0.8.1 pinned SGLang 0.5.6.post2 (before and after that date), v0.9.0 0.5.8 (#5590), and
# the sglang-0.5.8 wheel was built 2026-01-23: from 0.5.8. Earlier versions (the shipped SGLang
# 0.5.1.post1 rows among them) keep their engine files' defaults.
AIC_LAUNCHED = {"trtllm": "", "vllm": "0.12.0", "sglang": "0.5.8"}


def version_of(text):
    """A PEP 440 version (packaging.version.Version) of an engine_version cell, or None (empty, not
    a string, or not a version)."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def aic_launched(family: str, version) -> bool:
    """Whether a row of this engine family and version ran with AIConfigurator's launch rules."""
    first = AIC_LAUNCHED.get(family)
    if first is None:
        return False
    if first == "":
        return True
    v = version_of(version)
    return v is not None and v >= version_of(first)


def _norm(s: str) -> str:
    s = s.lower().split("/")[-1]
    for suffix in ("-instruct", "-chat", "-hf"):
        s = s.replace(suffix, "")
    return re.sub(r"[^a-z0-9]", "", s)


# Other spellings of the engine families in measured CSVs (normalised: lower case, alphanumerics)
ENGINE_ALIASES = {"tensorrtllm": "trtllm", "tensorrt": "trtllm", "trt": "trtllm", "trtllmpytorch": "trtllm"}


def engine_family(engine: str) -> str:
    """The family key of a CSV's engine cell (TensorRT-LLM, tensorrt_llm, TRT-LLM -> trtllm)."""
    key = _norm(engine)
    return ENGINE_ALIASES.get(key, key)


def _given(row, key: str, default: float) -> float:
    """A row's number `key` (aic_clients columns), else `default` (absent, empty or NaN)."""
    v = row.get(key)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return default
    return default if v != v else v


def row_workload(row, static: bool = False) -> Dict[str, object]:
    """The measured setting: closed loop, `concurrency` clients, isl / osl tokens (static: one
    batch of `concurrency` sequences), and the row's client (runs/aic_clients.py: lengths uniform
    in [int(L x range_ratio), L] where range_ratio < 1, benchmark_serving's draw; measured and
    warm-up requests per client; the prompt text's bytes per token where the client states it);
    without a client column AIConfigurator's (fixed lengths, 10c + 2c). One composed config per
    design takes many rows: a key a row leaves out keeps the workload's value (set_row_values)."""
    c, isl, osl = int(row["concurrency"]), int(row["isl"]), int(row["osl"])
    if static:
        return {"batch_size": c, "prompt_len": isl, "output_len": osl}
    ratio = _given(row, "range_ratio", 1.0)
    out = {
        "concurrency": c,
        "prompt_len": isl,
        "output_len": osl,
        "n_requests": int(_given(row, "requests_per_client", REQUESTS_PER_CLIENT)) * c,
        "warmup_requests": int(_given(row, "warmup_per_client", WARMUP_PER_CLIENT)) * c,
    }
    text = _given(row, "prompt_bytes_per_token", 0.0)
    if text > 0:
        out["prompt_bytes_per_token"] = text
    for dist, n in (("prompt_dist", isl), ("output_dist", osl)):
        out[f"{dist}.kind"] = "uniform" if ratio < 1.0 else "fixed"
        out[f"{dist}.low"] = int(n * ratio) if ratio < 1.0 else 0
        out[f"{dist}.high"] = n if ratio < 1.0 else 0
    return out


def row_launch(row, family: str, launch: str) -> str:
    """The launch a row runs with: `aic` or `defaults` (`auto` resolved by the row's version), or
    under `auto` the aic_mapping.yaml `launches` entry a row of AIConfigurator's schema names."""
    if launch == "auto":
        if isinstance(row.get("launch"), str) and row.get("launch"):
            return row["launch"]
        return "aic" if aic_launched(family, row.get("engine_version", "")) else "defaults"
    return launch


def launch_file(row) -> str:
    """The conf/engine file a row's `launches` entry runs it with ('' = its version's; runs/aic_rows.py)."""
    f = row.get("engine_file")
    return f if isinstance(f, str) else ""


def launch_overrides(row) -> List[str]:
    """The engine overrides of a row's `launches` entry (runs/aic_rows.py)."""
    o = row.get("launch_overrides")
    return list(o) if isinstance(o, (tuple, list)) else []


def row_dp(row) -> int:
    """A row's attention-DP ranks (1 where it records none)."""
    return max(1, int(row.get("dp", 1) or 1))


def inferencex_tokens(row) -> Dict[str, object]:
    """max_num_tokens of an InferenceX TensorRT-LLM launch (its scripts' MAX_NUM_TOKENS): round_up(
    round, (k + 1) x clients per attention-DP rank + isl + extra), at least floor; k the engine
    file's MTP draft tokens (k_attention_dp under attention DP). `tokens_rule` from aic_rows."""
    rule = row.get("tokens_rule")
    if not isinstance(rule, (tuple, list)) or not rule:
        return {}
    extra, rnd, floor, k, k_dp = rule
    dp = row_dp(row)
    k = k_dp if dp > 1 and k_dp > 0 else k
    need = (k + 1) * int(row["concurrency"]) // dp + int(row["isl"]) + extra
    return {"max_tokens_per_step": max(floor, -(-need // rnd) * rnd)}


def row_engine(row) -> Dict[str, object]:
    """The per-row engine values of a row's `launches` entry (runs/aic_rows.py `row_engine`): a
    value, "{concurrency}" (the row's clients), {below: C, then: a, else: b} (a below C clients; with
    `isl` and `osl` also a for a row of another stated shape) or {isl_times: n} (n x the row's stated
    isl, as a script's $((ISL * n)))."""
    pairs = row.get("row_engine")
    out: Dict[str, object] = {}
    c = int(row["concurrency"])
    for k, v in pairs if isinstance(pairs, (tuple, list)) else ():
        if v == "{concurrency}":
            v = c
        elif isinstance(v, dict) and "isl_times" in v:
            v = int(row["isl"]) * int(v["isl_times"])
        elif isinstance(v, dict):
            shape = all(int(row[n]) == int(v[n]) for n in ("isl", "osl") if n in v)
            v = v["then"] if c < int(v["below"]) or not shape else v["else"]
        out[str(k)] = v
    return out


def launch_engine(row, family: str, launch: str) -> Dict[str, object]:
    """Per-row engine settings of a launch recipe. `aic`: AIConfigurator's generator
    (aiconfigurator @961028348 cli/backends/trtllm.py:113; rule_plugin/vllm.rule, sglang.rule
    @c0a88170): max_num_tokens = bs + isl + 1500 with its batch size bs the row's batch per attention-DP
    rank (AIConfigurator's batch_size: concurrency / attention DP; each rank's executor its own), and
    TensorRT-LLM's max_batch_size bs (extra_engine_args templates; it sizes TensorRT-LLM's Mamba state
    pool, engine.state_pool_ratio); vLLM: --max-num-seqs bs (it sizes the start-up profile's sampler: core/profile_reserve.py);
    SGLang: --enable-mixed-chunk, --max-prefill-tokens isl + 1500; vLLM and SGLang: CUDA graphs
    captured for every batch size 1..bs (cuda_graph_batch_sizes, passed as --cudagraph-capture-sizes
    / --cuda-graph-bs since the generator gained them, #144, 2025-12-04), so no decode batch is padded.
    The generator's benchmark mode keeps these rules to date (rule_plugin/benchmark/{trtllm,vllm,
    sglang}.rule @095f58a5, from 2026-01-30; TensorRT-LLM's budget rounded up to 32 tokens from
    2026-02-25), while its deployment rules changed (batch size raised to >= 512 in the budget until
    2026-04-01, + 500 after): the benchmark ones are how measured points are launched. `auto`: `aic`
    for a family and version in AIC_LAUNCHED, the engine files' defaults for the others; a row
    with a `launches` entry its rule (inferencex_tokens) and per-row values (row_engine)."""
    how = row_launch(row, family, launch)
    if how not in ("aic", "defaults"):
        return {**inferencex_tokens(row), **row_engine(row)}
    if how != "aic":
        return {}
    bs, isl = int(row["concurrency"]) // row_dp(row), int(row["isl"])
    if family == "trtllm":  # its template's max_batch_size: {{ max_batch_size }} = bs
        return {"max_tokens_per_step": bs + isl + 1500, "max_batch": bs}
    if family == "vllm":  # no per-request cap: the chunk is the budget (conf/engine/vllm.yaml)
        budget = bs + isl + 1500
        return {"max_tokens_per_step": budget, "chunk_size": budget, "batch_buckets": [], "max_batch": bs}
    if family == "sglang":
        return {"mixed_steps": True, "max_tokens_per_step": isl + 1500, "batch_buckets": []}
    return {}


_TP_KEYS = ("hardware.n_chips=", "hardware.tensor_parallel=")
# A worker's compositions, kept across the chunks of one validate call (its token) and dropped at
# the next call: worker processes outlive a call, configuration files need not.
_WORKER: Dict[str, object] = {"token": None, "cache": {}}
# The design key of a row the model cannot express: (UNMAPPED, reason) (validation.read_rows)
UNMAPPED = "unmapped"


def pinned_keys(overrides) -> set:
    """The config keys the user's overrides set (a row's value does not replace them)."""
    return {o.split("=", 1)[0].lstrip("+") for o in overrides}


def composed(cache, key, overrides):
    """The composed config of a row's design: once per design without its tensor parallelism, on
    a Composer kept in `cache` (Hydra composes once per choice of config groups, ~0.5-1 s each; a
    design's field overrides go on a copy of that, as `decodelab -m` applies them); each TP degree
    is a copy with the two fields set, exactly what composing with them would give (an override of
    either on the command line wins)."""
    from omegaconf import OmegaConf

    base = tuple(k for k in key if not k.startswith(_TP_KEYS))
    if ("compose", base) not in cache:
        if "composer" not in cache:
            cache["composer"] = context_composer()
        cfg = compose_job(cache["composer"], ["tracking=off", *base, *overrides], reuse=False)
        OmegaConf.set_readonly(cfg, False)
        cache[("compose", base)] = cfg
    cfg = cache[("compose", base)].copy()
    given = pinned_keys(overrides)
    for k in key:
        if k.startswith(_TP_KEYS):
            name, value = k.split("=", 1)
            if name not in given:
                OmegaConf.update(cfg, name, int(value))
    # interpolations (the engines' defaults by chip) resolved once here, not at every field read of
    # every row (OmegaConf parses an interpolation each time it is read)
    OmegaConf.resolve(cfg)
    return cfg


def predict(cache, key, row, overrides, pinned, static, launch, keep_steps: bool = False) -> Result:
    """The result of one row (its design built once per `cache`, its workload set in place);
    `keep_steps`: with the run's per-request and per-step tables (Result.serving)."""
    from omegaconf import OmegaConf

    disagg = is_disagg(row)  # pools of their own: evaluated whole (modes/serving/disagg.py)
    if key not in cache:
        cfg = composed(cache, key, overrides)
        design = mixed = draft = None
        if not static and not disagg:
            try:  # with in-engine MTP the target beside its draft (modes/serving/mtp.py)
                design, mixed, draft = serving_designs(cfg)
            except (ConfigError, Infeasible):
                pass  # evaluate() records the reason
        cache[key] = (cfg, design, mixed, draft, {}, pool_values(cfg, design))
    cfg, design, mixed, draft, first, built = cache[key]
    values = {f"workload.{k}": v for k, v in row_workload(row, static).items()}
    family = engine_family(str(row["engine"]))
    if disagg:
        values.update(pool_settings(row, family, row_launch(row, family, launch) == "aic"))
    else:
        values.update({f"engine.{k}": v for k, v in launch_engine(row, family, launch).items()})
    if static or design is None:
        cfg = cfg.copy()
        for k, v in values.items():
            if k not in pinned:  # a pool's engine dict takes new keys (validation_disagg.pool_settings)
                OmegaConf.update(cfg, k, v, force_add=k.startswith("disagg."))
        return evaluate(cfg, keep_steps=keep_steps)
    set_row_values(cfg, values, pinned, first)
    try:
        design, mixed, draft = designs_for_row(cache, (key, built), cfg, (design, mixed, draft))
        return evaluate_serving(cfg, design, keep_steps=keep_steps, mixed=mixed, draft=draft)
    except ConfigError as e:
        return Result.invalid(str(e))
    except Infeasible as e:
        return Result.infeasible(str(e))


def pool_values(cfg, design) -> Optional[tuple]:
    """The engine values `design`'s KV pool is sized with under `cfg` (None: no design)."""
    if design is None:
        return None
    return profile_reserve.pool_engine_values(cfg, design.memory.get("state_bytes_per_seq", 0.0))


def designs_for_row(cache, key_built, cfg, designs):
    """The (design, mixed, draft) a row runs: the design's own, unless the row's engine values size
    the KV pool otherwise than the composed ones it was built with (`key_built`: the design key and
    those values; profile_reserve.pool_engine_values: a vLLM or TensorRT-LLM launch's max_num_tokens
    and max_num_seqs / max_batch_size sizing the start-up profile, TensorRT-LLM's Mamba states held one
    per max_batch sequence); then the designs built with the row's values, kept per values."""
    key, built = key_built
    values = pool_values(cfg, designs[0])
    if values == built:
        return designs
    at = ("pool", key, values)
    if at not in cache:
        cache[at] = serving_designs(cfg)
    return cache[at]


def set_row_values(cfg, values: dict, pinned: set, first: dict) -> None:
    """Set a row's values on its design's config in place (one composed config per design, many
    rows); a key an earlier row set and this row does not gets back the value it had before the
    first row (`first`, kept with the design), so no row's value leaks into the next."""
    from omegaconf import OmegaConf

    for k in [k for k in first if k not in values]:
        OmegaConf.update(cfg, k, first.pop(k))
    for k, v in values.items():
        if k not in pinned:
            if k not in first:
                first[k] = OmegaConf.select(cfg, k)
            OmegaConf.update(cfg, k, v)


def row_version(row) -> str:
    """A row's engine_version cell as text ("" when empty or not text)."""
    v = row.get("engine_version", "")
    return v if isinstance(v, str) else ""


# Columns of an AIConfigurator row (runs/aic_rows.py) a record keeps: the CSV's data row, its id,
# system and mode, its client and whether its TTFT is a serving measurement (runs/aic_clients.py), and
# the recipe a disaggregated row ran (runs/aic_recipes.py files) or the candidate it is (aic_candidates.py)
ROW_KEYS = ("row", "id", "system", "mode", "client", "ttft_ok", "ttft_note", "recipe", "candidate")


def record(row, key, res, launch: str = "") -> dict:
    """A row of the validation table: the measured setting, its engine file and launch (`aic`,
    `defaults`; empty for a row not run), predicted vs measured."""
    m = res["metrics"]
    rec = {k: row[k] for k in ("model", "engine", "precision", "tp", "concurrency", "isl", "osl")}
    rec.update({k: row[k] for k in ROW_KEYS if k in row})  # a Series: its labels; a dict: its keys
    rec["engine_version"] = row_version(row)
    rec["engine_config"] = key[1].split("=", 1)[1] if key[0] != UNMAPPED else ""
    rec["launch"] = row_launch(row, engine_family(str(row["engine"])), launch) if rec["engine_config"] else ""
    rec.update(
        status=res["status"],
        reason=res["reason"],
        ttft_meas=float(row["ttft_ms"]),
        tpot_meas=float(row["tpot_ms"]),
        ttft_pred=m.get("ttft_ms", float("nan")),
        tpot_pred=m.get("tpot_ms", float("nan")),
    )
    for side in ("meas", "pred"):  # the output rate TTFT and TPOT imply (validation_steps.output_rate)
        rate = output_rate(row["concurrency"], row["osl"], rec[f"ttft_{side}"], rec[f"tpot_{side}"])
        rec[f"tput_{side}"] = float(rate)
    for k in ("ttft", "tpot", "tput"):
        rec[f"{k}_err_pct"] = 100.0 * (rec[f"{k}_pred"] / rec[f"{k}_meas"] - 1.0)
    return rec


Item = Tuple[object, tuple, object]  # (sort key: row number, or (CSV index, row number); design key; row)


def row_result(cache, key, row, overrides, pinned, static, launch, keep_steps: bool = False) -> Result:
    """predict() of one row, a row the table maps to no design invalid with its reason; a config
    that does not compose is a ValueError of its first line (picklable, whatever raised it)."""
    if key[0] == UNMAPPED:
        return Result.invalid(key[1])
    try:
        return predict(cache, key, row, overrides, pinned, static, launch, keep_steps)
    except (ValueError,) + C.hydra_errors() as e:
        raise ValueError(str(e).strip().splitlines()[0] if str(e).strip() else repr(e)) from None


def predict_chunk(cache, items: Sequence[Item], overrides, static, launch) -> List[Tuple[int, object]]:
    """(row number, record) per item; a config that does not compose ends the chunk with (row
    number, ValueError of its first line)."""
    pinned = pinned_keys(overrides)
    out = []
    with C.context():
        for n, key, row in items:
            try:
                res = row_result(cache, key, row, overrides, pinned, static, launch)
            except ValueError as e:
                out.append((n, e))
                break
            out.append((n, record(row, key, res, launch)))
    return out


def _in_worker(token: str, items, overrides, static, launch):
    if _WORKER["token"] != token:
        _WORKER.update(token=token, cache={})
    return predict_chunk(_WORKER["cache"], items, overrides, static, launch)


def _cost(chunk: Sequence[Item]) -> float:
    """A chunk's simulation work, roughly: requests x output tokens (10 per client per row)."""
    return sum(float(row["concurrency"]) * float(row["osl"]) for _, _, row in chunk)


def predict_rows(
    items: Sequence[Item], overrides: List[str], static: bool, launch: str, jobs: int = 1
) -> List[dict]:
    """The records of `items` in their order; `jobs` > 1: the designs' chunks over that many local
    worker processes (the largest first). Raises ValueError for a config that does not compose (the
    first in row order)."""
    chunks: Dict[tuple, List[Item]] = {}
    for it in items:
        chunks.setdefault(it[1], []).append(it)
    work = list(chunks.values())
    if jobs <= 1 or len(work) <= 1:
        cache: dict = {}
        results = []
        for chunk in work:
            got = predict_chunk(cache, chunk, overrides, static, launch)
            results += got
            if got and isinstance(got[-1][1], ValueError):
                break
    else:
        from joblib import Parallel, delayed

        token = uuid.uuid4().hex
        work.sort(key=_cost, reverse=True)
        with Parallel(n_jobs=min(jobs, len(work)), batch_size=1, return_as="generator_unordered") as par:
            results = [
                r
                for got in par(delayed(_in_worker)(token, c, overrides, static, launch) for c in work)
                for r in got
            ]
    results.sort(key=lambda r: r[0])
    first_error: Optional[ValueError] = next((r for _, r in results if isinstance(r, ValueError)), None)
    if first_error is not None:
        raise first_error
    return [r for _, r in results]
