"""What composing a config does not catch, checked at the edge before anything runs (issue 40):
values that do not resolve (`${oc.env:UNSET}`), required fields left unset (an empty YAML,
`~model`), NaN and infinite numbers, a key appended to the top of the config (`+foo=bar`), and
a user's config file that carries another component's `name:`.
Each problem is one line naming the override or the file (decodelab.config.plan._check)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

import yaml

from decodelab.config.diagnose import did_you_mean, listing, search_dirs
from decodelab.core.checks import nonfinite
from decodelab.paths import CONF_DIR

NAMED_GROUPS = ("model", "hardware")  # a file's `name:` is its option name (every shipped one)
_FINITE = "not a finite number (nan and inf are refused); give a number"


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    m = re.search(r"Environment variable '([^']+)' not found", text)
    if m:
        return f"environment variable {m.group(1)} is not set; set it or give the value itself"
    return text


def _option_file(group: str, option: str, dirs: Sequence[str]) -> str:
    for d in dirs:
        p = Path(d) / group / f"{option}.yaml"
        if p.is_file():
            return str(p)
    return f"{group}/{option}.yaml"


def resolved_problems(comp, groups: Tuple[str, ...], cfg) -> List[str]:
    """The composed config of a choice of config groups resolves, sets every required field and
    holds only finite numbers (one line per problem, naming the group's file)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        tree = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as e:
        return [_missing(comp, groups, str(e.full_key))]
    except OmegaConfBaseException as e:
        return [f"{e.full_key}: {_message(e)}"]
    return [f"{k}: {_FINITE}" for k in nonfinite({k: v for k, v in tree.items() if k != "hydra"})]


def _missing(comp, groups: Tuple[str, ...], key: str) -> str:
    top = key.split(".")[0]
    options = comp.options(top) if "." not in key else []
    if options:
        return f"{key} is required but not set: choose {key}=OPTION ({key} options: {listing(options)})"
    chosen = [o.partition("=")[2] for o in groups if o.lstrip("+").partition("=")[0] == top]
    if chosen:
        dirs = search_dirs(comp.source.config_dir, comp.source.common)
        where = _option_file(top, chosen[0], dirs)
        return f"{where}: {key} is required but not set; add it to that file or override {key}=..."
    return f"{key} is required but not set (add it to the group's YAML or override {key}=...)"


def override_problems(text: str, parsed, base, cfg) -> List[str]:
    """A field override applied to `cfg` (a copy of `base`): it may not append a key to the top of
    the config, and its value must resolve to finite numbers."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if parsed.is_delete():
        return []
    key = parsed.key_or_group
    top = key.split(".")[0]
    if parsed.is_add() and top not in base:
        keys = sorted(str(k) for k in base.keys() if k != "hydra")
        head = text.partition("=")[0]  # once per key, whatever the values swept
        return [f"{head}: {top} is not a key of the config{did_you_mean(top, keys)} (keys: {listing(keys)})"]
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as e:
        return [f"{text}: {_message(e)}"]
    bad = nonfinite(value, key)
    return [f"{text}: {bad[0]} is {_FINITE}"] if bad else []


def _selected(jobs: Sequence[Sequence[str]]) -> Dict[str, Set[str]]:
    """group -> options chosen by the jobs' group overrides and the shipped defaults."""
    out: Dict[str, Set[str]] = {}
    raw = yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text()) or {}
    for d in raw.get("defaults") or []:
        if isinstance(d, dict) and len(d) == 1:
            ((g, opt),) = d.items()
            out.setdefault(str(g).split("@")[0], set()).add(str(opt))
    for job in jobs:
        for o in job:
            k, _, v = o.lstrip("+").partition("=")
            if v and re.fullmatch(r"[\w.-]+", v):
                out.setdefault(k.split("@")[0], set()).add(v)
    return out


def user_file_problems(comp, jobs: Sequence[Sequence[str]]) -> List[str]:
    """A user's model or hardware file (`--config-dir`, `hydra.searchpath`, a sweep file's
    folder) whose `name:` is another one's. (A user's file with a shipped file's name is read
    in its place, config.searchpath: user folders come first.)"""
    extra = search_dirs(None, comp.source.common)[:-1]
    users = [d for d in (comp.source.config_dir, *extra) if d]
    e: List[str] = []
    for group, options in sorted(_selected(jobs).items()):
        if group in NAMED_GROUPS:
            for opt in sorted(options):
                e += _name_problem(group, opt, users)
    return e


def _name_problem(group: str, opt: str, users: Sequence[str]) -> List[str]:
    for d in users:
        p = Path(d) / group / f"{opt}.yaml"
        if not p.is_file():
            continue
        try:
            raw = yaml.safe_load(p.read_text())
        except yaml.YAMLError:
            return []  # composing names the broken file
        name = raw.get("name") if isinstance(raw, dict) else None
        if name is not None and str(name) != opt:
            return [
                f"{p}: name: {name} differs from the file's name {opt}; a {group} is known by its "
                f"file name: set name: {opt} (or choose {group}={name})"
            ]
        return []
    return []
