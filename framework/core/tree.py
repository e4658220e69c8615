"""A resolved design: the composed config as plain, read-only values, made once at the edge.

The core reads a design as `cfg.hardware.memory["hbm"].bandwidth_gb_s` whatever made it (Hydra
for the command line and the API, plain dicts for the grid), so it never sees OmegaConf: no
interpolation is parsed at a read, no node is validated, no copy is deep. A `Tree` is a dict
with attribute access that refuses to change; lists become tuples. A mode that needs another
design (a probe batch, a draft model, a pool's hardware) asks for a changed copy with
`replace(cfg, {"workload.batch_size": 1})`, which shares every untouched branch.
"""

from __future__ import annotations

from typing import Any, List, Mapping

MISSING = "???"  # OmegaConf's mark of a required field left unset


class Tree(dict):
    """Nested read-only mapping with attribute access (what core.build and the modes read)."""

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def _read_only(self, *args, **kwargs):
        raise TypeError("a resolved design is read-only: decodelab.core.tree.replace gives a changed copy")

    __setitem__ = __delitem__ = __setattr__ = __delattr__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only  # type: ignore[assignment]

    def copy(self) -> "Tree":  # read-only: a copy is the value itself
        return self

    def __copy__(self) -> "Tree":
        return self

    def __deepcopy__(self, memo) -> "Tree":
        return self

    def __reduce__(self):  # pickled by value (dict's own protocol would call __setitem__)
        return (Tree, (dict(self),))

    def to_dict(self) -> dict:
        """Plain nested dicts and lists (JSON-ready)."""
        return {k: _thaw(v) for k, v in self.items()}


def freeze(x: Any) -> Any:
    """Nested dicts / lists (e.g. OmegaConf.to_container(cfg, resolve=True)) as a Tree."""
    if isinstance(x, Tree):
        return x
    if isinstance(x, Mapping):
        return Tree({k: freeze(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v) for v in x)
    return x


def _thaw(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _thaw(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


def replace(cfg: Tree, fields: Mapping[str, Any]) -> Tree:
    """A copy of `cfg` with dotted fields set ("workload.batch_size": 1, "model": a Tree); only
    the mappings on each path are new. A missing intermediate node is created (a pool's own
    hardware node may add a field the design had not set)."""
    out = cfg
    for key, value in fields.items():
        out = _set(out, key.split("."), freeze(value))
    return out


def _set(node: Mapping, parts, value) -> Tree:
    d = dict(node)
    head = parts[0]
    d[head] = value if len(parts) == 1 else _set(node.get(head) or Tree(), parts[1:], value)
    return Tree(d)


def missing_keys(x: Any, prefix: str = "") -> List[str]:
    """Dotted keys of the required fields left unset in x (as OmegaConf.missing_keys names them)."""
    if isinstance(x, dict):
        items = [(f"{prefix}.{k}" if prefix else str(k), v) for k, v in x.items()]
    elif isinstance(x, (list, tuple)):
        items = [(f"{prefix}[{i}]", v) for i, v in enumerate(x)]
    else:
        return [prefix] if isinstance(x, str) and x == MISSING else []
    return [k for key, v in items for k in missing_keys(v, key)]
