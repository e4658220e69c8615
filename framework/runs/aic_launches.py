"""How an AIConfigurator row was launched (framework/data/validation/aic_mapping.yaml `launches`): the
first entry whose `match` fits the row gives its engine file, engine overrides, max_num_tokens rule
and per-row engine values (launch_of).

A run that measured several launches at the same settings and exported them alike leaves the
launch open: entries whose `match` carries a `sweep` (the settings each launch's config swept that
day, from the benchmark's config at the run's commit) are the launches of one run, and a row that
more than one of them swept ran as one of them, which the row does not say (launches_of: every
such launch; aic_candidates.py runs each and reports their mean). A row only one launch swept ran
as that one."""

from __future__ import annotations

from typing import List, Optional, Tuple

from decodelab.runs.aic_mapping import fits, mapping
from decodelab.runs.validation_names import conf_yaml

NO_LAUNCH = {"launch": "", "engine_file": "", "launch_overrides": (), "tokens_rule": (), "row_engine": ()}


def engine_field(name: str, keys: Tuple[str, ...], default=0):
    """A field of conf/engine/<name>.yaml (`keys` nested), else of the files its `defaults` list
    inherits (in order), else `default`."""
    d = conf_yaml("engine", name)
    v = d
    for k in keys:
        v = v.get(k) if isinstance(v, dict) else None
    if v is not None:
        return v
    for parent in d.get("defaults") or []:
        if isinstance(parent, str) and parent != "_self_":
            v = engine_field(parent, keys, None)
            if v is not None:
                return v
    return default


def described(e: dict) -> dict:
    """A `launches` entry as a row's launch columns: its name, engine file, engine overrides (the
    design's), max_num_tokens rule (extra, round, floor, the engine file's MTP k and k under
    attention DP) and per-row engine values (`row`: (field, value or rule) pairs,
    validation_predict.row_engine)."""
    rule = ()
    if e.get("tokens"):
        t, f = e["tokens"], e.get("engine", "")
        ks = (engine_field(f, ("mtp", "k")), engine_field(f, ("mtp", "k_attention_dp"))) if f else (0, 0)
        rule = (int(t["extra"]), int(t["round"]), int(t["floor"]), *map(int, ks))
    return {
        "launch": str(e["name"]),
        "engine_file": str(e.get("engine", "")),
        "launch_overrides": tuple(e.get("overrides") or ()),
        "tokens_rule": rule,
        "row_engine": tuple((e.get("row") or {}).items()),
    }


def _fitting(row, gpus, clients) -> List[dict]:
    """The `launches` entries a row may have run: the first that fits it, and where that one has a
    `sweep`, every later one with a `sweep` that fits too; [] where none fits."""
    found = []
    for e in mapping().get("launches") or []:
        match = e.get("match") or {}
        if found and "sweep" not in match:
            continue
        if fits(match, row, gpus, clients):
            found.append(e)
            if "sweep" not in match:
                break
    return found


def launches_of(row, gpus=None, clients: Optional[int] = None) -> List[dict]:
    """The launches a row may have run, described (_fitting; `gpus`: the replica's, `clients`: the
    row's)."""
    return [described(e) for e in _fitting(row, gpus, clients)]


def open_launches(row, gpus=None, clients: Optional[int] = None) -> List[dict]:
    """launches_of where it holds more than one launch (the row's launch left open), else []: a row
    of one launch reads no engine file here."""
    found = _fitting(row, gpus, clients)
    return [described(e) for e in found] if len(found) > 1 else []


def launch_of(row, gpus=None, clients: Optional[int] = None) -> dict:
    """The row's launch (the first of launches_of), NO_LAUNCH where aic_mapping.yaml knows none."""
    found = _fitting(row, gpus, clients)
    return described(found[0]) if found else dict(NO_LAUNCH)
