"""The composed configs of a sweep's choices of config groups, from a few compositions (issue 43).
A sweep of 5 models x 4 systems has 20 choices; Hydra composes each in ~0.15 s. But where an
option's YAML only writes its own node (no `# @package` header, a defaults list of nothing but
other options of its group), the config of `model=B hardware=Y` is the first job's config of
`model=A hardware=X` with its `model` node taken from the config of `model=B` alone and its
`hardware` node from that of `hardware=Y` alone: the other nodes are merged from the same files
in the same order, and interpolations are resolved only later. config.plan composes those
(one per option the first job does not use) to check every option anyway, so each further
choice costs a copy (~5 ms); a choice this cannot build (an option pulling in other groups,
another set of groups) is left to Hydra (Composer.base), as before.

The bases go to the workers pickled, with the chunks of jobs of their choice
(decodelab.runs.items.Chunk), so a worker composes nothing."""

from __future__ import annotations

import copy
import os
import pickle
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from decodelab.config.fields import parse

_PACKAGE = re.compile(r"^\s*#\s*@package\b", re.M)


def config_dirs(probe) -> List[Path]:
    """The folders of config files a composition reads (`hydra.runtime.config_sources` of a
    config composed with its hydra node: conf/, --config-dir, hydra.searchpath entries)."""
    rt = probe.hydra.runtime
    return [Path(os.path.join(rt.cwd, s.path)) for s in rt.config_sources if s.schema == "file"]


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 15x faster where built


@lru_cache(maxsize=1024)
def _plain(dirs: Tuple[Path, ...], group: str, option: str, seen: frozenset = frozenset()) -> bool:
    """Every file of `group/option` on the search path writes only the group's node: no package
    header, defaults (if any) only `_self_` and other options of the same group, likewise.
    (Cached: bases() reads the files again, once per plan.)"""
    files = [d / group / f"{option}.yaml" for d in dirs if (d / group / f"{option}.yaml").is_file()]
    if not files or (group, option) in seen:
        return False
    for f in files:
        try:
            text = f.read_text()
            raw = yaml.load(text, Loader=_LOADER)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return False
        if _PACKAGE.search(text) or not isinstance(raw, (dict, type(None))):
            return False
        defaults = (raw or {}).get("defaults", [])
        if not isinstance(defaults, list):
            return False
        for d in defaults:
            if d == "_self_":
                continue
            if not isinstance(d, str) or not re.fullmatch(r"[\w.-]+", d):
                return False
            if not _plain(dirs, group, d, seen | {(group, option)}):
                return False
    return True


def _node_path(override: str, dirs: Tuple[Path, ...]) -> Optional[str]:
    """The config node an `group=option` override fills, where the option is plain (_plain)."""
    o = parse(override)
    if o.is_add() or o.is_delete() or o.is_force_add() or o.is_sweep_override():
        return None
    value = o.value()
    group = o.key_or_group
    if not isinstance(value, str) or not _plain(dirs, group, value):
        return None
    return (o.package or group).replace("/", ".")


def _key(override: str) -> Tuple[str, Optional[str]]:
    o = parse(override)
    return o.key_or_group, o.package


def derive(comp, first: Tuple[str, ...], groups: Tuple[str, ...], dirs: Tuple[Path, ...], pickled=None):
    """The composed config of `groups` built from the first job's (`first`; `pickled`: it,
    pickled) and those of its options alone (comp.base((option,)), composed before), or None
    where it cannot be."""
    from omegaconf import open_dict

    have, want = {_key(o): o for o in first}, {_key(o): o for o in groups}
    if have.keys() != want.keys() or len(have) != len(first) or len(want) != len(groups):
        return None
    swaps = []
    for k, o in want.items():
        if o == have[k]:
            continue
        path = _node_path(o, dirs)
        alone = comp.cached_base((o,))
        if path is None or alone is None or _node_path(have[k], dirs) != path:
            return None
        swaps.append((path, alone))
    cfg = pickle.loads(pickled or pickle.dumps(comp.base(first)))  # a copy, 5x faster than deepcopy
    with open_dict(cfg):
        for path, alone in swaps:
            head, _, leaf = path.rpartition(".")
            parent = cfg if not head else _node(cfg, head)
            parent[leaf] = copy.deepcopy(_node(alone, path))
    return cfg


def _node(cfg, path: str):
    node = cfg
    for p in path.split("."):
        node = node._get_node(p)
    return node


def bases(comp, first: Tuple[str, ...], choices: Sequence[Tuple[str, ...]], dirs) -> Dict[tuple, bytes]:
    """{choice: its composed config, pickled} for every choice `derive` can build."""
    _plain.cache_clear()  # the files as they are now
    dirs, out = tuple(dirs), {}
    pickled = out[first] = pickle.dumps(comp.base(first))
    for groups in dict.fromkeys(choices):
        cfg = None if groups == first else derive(comp, first, groups, dirs, pickled)
        if cfg is not None:
            out[groups] = pickle.dumps(cfg)
    return out
