"""How a row of AIConfigurator's silicon_sample.csv states its replica's parallel split, read as
the launch that ran (framework/runs/aic_rows.py parallel_of and concurrency_of; the rules and their
sources: framework/data/validation/aic_mapping.yaml `ep_counted_twice`, `expert_parallel_launched`,
`unrecorded_attention_dp`).

- `launched`: rows of a dump that counts the expert-parallel size twice (InferenceX single-node runs
  of T GPUs with EP E = T recorded as T x E GPUs) -> (tp, attention_dp, moe_tp, moe_ep) of the T GPUs;
  rows recorded with experts split by tensor parallelism (moe_tp = tp_size) whose launch script chose
  EP and attention DP itself (`script_split`) or enabled expert parallelism anyway (`ep_launched`)
  -> experts over the tp_size GPUs;
- `unrecorded_dp`: TensorRT-LLM MoE rows whose tp_size holds attention-DP ranks that attention_dp_size
  does not record (silicon_concurrency = batch_size x tp_size) -> the attention-DP size.

Each returns None where its rule does not apply; the rows then keep their columns as written."""

from __future__ import annotations

import math
from typing import Optional, Tuple

from decodelab.runs.aic_mapping import cell, fits, mapping, stated_clients

Split = Tuple[int, int, int, int]  # tp (attention), attention_dp, moe_tp, moe_ep


def _int(row, col: str, default: Optional[int] = None) -> Optional[int]:
    try:
        return int(float(cell(row, col)))
    except ValueError:
        return default


def counted_twice(row) -> bool:
    """Whether the row's silicon_data_source names a dump of `ep_counted_twice`."""
    source = cell(row, "silicon_data_source")
    return any(m in source for e in mapping().get("ep_counted_twice") or [] for m in e["markers"])


def launched(row) -> Optional[Split]:
    """(tp, attention_dp, moe_tp, moe_ep) of the GPUs a row ran on where its columns do not say it
    (twice_counted, else script_split, else ep_launched), or None."""
    return (twice_counted(row) if counted_twice(row) else None) or script_split(row) or ep_launched(row)


def _rule_fits(rule: dict, row, tp: int, clients: int) -> bool:
    """Whether a `script_parallel` rule's tp / isl / osl (absent: any) fit and the clients exceed its `above`."""
    same = all(
        str(rule[k]) == str(v)
        for k, v in (("tp", tp), ("isl", _int(row, "isl")), ("osl", _int(row, "osl")))
        if k in rule
    )
    return same and clients > int(rule.get("above", 0))


def tp_split_recorded(row) -> Optional[int]:
    """tp_size of a row that records its experts split by tensor parallelism over two or more GPUs
    (attention_dp_size 1, moe_tp_size = tp_size, moe_ep_size 1; empty cells read so), else None."""
    tp, adp = _int(row, "tp_size", 1), _int(row, "attention_dp_size", 1)
    mtp, mep = _int(row, "moe_tp_size", tp), _int(row, "moe_ep_size", 1)
    return tp if tp >= 2 and adp == 1 and mtp == tp and mep == 1 else None


def script_split(row) -> Optional[Split]:
    """(tp, 1, 1, tp) or, with attention DP, (1, tp, 1, tp) of an aggregated row that fits a `script_parallel`
    entry (its launch script chose expert and attention parallelism from TP, ISL, OSL and clients; the row
    records tp_size only): the first of the entry's rules that fits sets them; None where none fits (the row
    ran as recorded) or no entry does."""
    tp = tp_split_recorded(row)
    if tp is None:
        return None
    clients = stated_clients(row) or _int(row, "batch_size", 0)
    for e in mapping().get("script_parallel") or []:
        if fits(e["match"], row):
            rule = next((r for r in e["rules"] if _rule_fits(r, row, tp, clients)), None)
            if rule is None or not rule.get("ep"):
                return None
            return (1, tp, 1, tp) if rule.get("dp") else (tp, 1, 1, tp)
    return None


def twice_counted(row) -> Optional[Split]:
    """(tp, attention_dp, moe_tp, moe_ep) of the T GPUs a row of a twice-counting dump ran on, or None
    (not the signature G = tp_size x attention_dp_size = T x T of EP = TP). TensorRT-LLM and SGLang
    record moe T x T (tp_size 1 with attention_dp_size T x T: attention DP over the T GPUs); vLLM
    records tp_size T, attention_dp_size T, moe 1 x T x T (attention tensor-parallel)."""
    tp, adp = _int(row, "tp_size", 1), _int(row, "attention_dp_size", 1)
    mtp, mep = _int(row, "moe_tp_size", 1), _int(row, "moe_ep_size", 1)
    g = tp * adp
    t = math.isqrt(g)
    if t < 2 or t * t != g:
        return None
    if mtp == mep == t:
        if adp == 1:
            return t, 1, 1, t
        return (1, t, 1, t) if tp == 1 else None
    if mtp == 1 and mep == g and tp == adp == t:
        return t, 1, 1, t
    return None


def ep_launched(row) -> Optional[Split]:
    """(tp, 1, 1, tp) of an aggregated row that fits an `expert_parallel_launched` entry and records
    its experts split by tensor parallelism (attention_dp_size 1, moe_tp_size = tp_size >= 2,
    moe_ep_size 1), though its launch enabled expert parallelism (vLLM --enable-expert-parallel,
    TensorRT-LLM --ep_size=$TP): whole experts over the tp_size GPUs (EP = TP); None otherwise."""
    entries = mapping().get("expert_parallel_launched") or []
    if not any(fits(e["match"], row) for e in entries):  # fits: aggregated rows only
        return None
    tp = tp_split_recorded(row)
    return None if tp is None else (tp, 1, 1, tp)


def unified_tp(row, is_moe: bool) -> Optional[Split]:
    """(moe_tp x moe_ep / attention_dp, attention_dp, moe_tp, moe_ep) of a MoE row of a
    `unified_tensor_parallel` backend whose tp_size x attention_dp_size is not its experts' split
    moe_tp_size x moe_ep_size (the GPUs AIConfigurator's generator launched it on), or None."""
    backends = (mapping().get("unified_tensor_parallel") or {}).get("backends") or []
    if not is_moe or cell(row, "backend").lower() not in backends:
        return None
    tp, adp = _int(row, "tp_size", 1), _int(row, "attention_dp_size", 1)
    mtp, mep = _int(row, "moe_tp_size", tp * adp), _int(row, "moe_ep_size", 1)
    gpus = mtp * mep
    if gpus == tp * adp or gpus % adp:
        return None
    return gpus // adp, adp, mtp, mep


def unrecorded_dp(row, recorded: Optional[int], is_moe: bool) -> Optional[int]:
    """The attention-DP size a row of an `unrecorded_attention_dp` backend ran with but did not
    record (its tp_size), or None: a MoE row, attention_dp_size empty, tp_size > 1, moe_tp x moe_ep =
    tp_size, and the recorded silicon_concurrency = batch_size x tp_size."""
    backends = (mapping().get("unrecorded_attention_dp") or {}).get("backends") or []
    if not is_moe or cell(row, "backend").lower() not in backends or cell(row, "attention_dp_size"):
        return None
    tp, bs = _int(row, "tp_size", 1), _int(row, "batch_size")
    mtp, mep = _int(row, "moe_tp_size", tp), _int(row, "moe_ep_size", 1)
    if tp < 2 or bs is None or recorded is None or mtp * mep != tp or recorded != bs * tp:
        return None
    return tp
