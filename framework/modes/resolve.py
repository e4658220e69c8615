"""The edge of the modes: a composed config (OmegaConf) becomes a resolved design (core.tree.Tree)
once, before anything reads it; every mode and the core read plain values from then on. A mode
that needs a changed design (`with_fields`) gets a new Tree sharing the untouched branches."""

from __future__ import annotations

from typing import Any, Mapping

from decodelab.core.checks import schema_problems
from decodelab.core.tree import Tree, freeze, replace
from decodelab.errors import ConfigError


def resolved(cfg) -> Any:
    """`cfg` as a Tree: an OmegaConf config with every interpolation resolved once, a dict frozen,
    a Tree as it is (an attribute object made by hand, e.g. a test's namespace, is left as it is).
    Raises ConfigError (one line) for an interpolation that does not resolve."""
    if isinstance(cfg, Tree):
        return cfg
    if isinstance(cfg, Mapping) and not _is_omegaconf(cfg):
        return freeze(cfg)
    if not _is_omegaconf(cfg):
        return cfg
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        tree = freeze(OmegaConf.to_container(cfg, resolve=True))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{key}: {msg}" if key and key not in msg else msg) from None
    problems = schema_problems(tree)  # unset required fields, appended keys: before any read
    if problems:
        raise ConfigError("\n".join(problems))
    return tree


def with_fields(cfg, fields: Mapping[str, Any]) -> Tree:
    """A resolved copy of cfg with dotted fields set (core.tree.replace)."""
    return replace(resolved(cfg), fields)


def _is_omegaconf(cfg) -> bool:
    return type(cfg).__module__.startswith("omegaconf")
