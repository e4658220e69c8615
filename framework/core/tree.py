"""A resolved design: the composed config as plain, read-only values, made once at the edge.

The core reads a design as `cfg.hardware.memory["hbm"].bandwidth_gb_s` whatever made it (Hydra
for the command line and the API, plain dicts for the grid), so it never sees OmegaConf: no
interpolation is parsed at a read, no node is validated, no copy is deep. A `Tree` is a dict
with attribute access that refuses to change; lists become tuples. A mode that needs another
design (a probe batch, a draft model, a pool's hardware) asks for a changed copy with
`replace(cfg, {"workload.batch_size": 1})`, which shares every untouched branch.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Tuple

MISSING = "???"  # OmegaConf's mark of a required field left unset


class Tree(dict):
    """Nested read-only mapping with attribute access (what core.build and the modes read)."""

    __slots__ = ("_memo",)  # answers of leaf_keys per test (the values never change)

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


def missing_keys(x: Any) -> List[str]:
    """Dotted keys of the required fields left unset in x (as OmegaConf.missing_keys names them)."""
    return list(leaf_keys(x, _unset))


def _unset(v: Any) -> bool:
    return isinstance(v, str) and v == MISSING


def leaf_keys(x: Any, test: Callable[[Any], bool]) -> Tuple[str, ...]:
    """Dotted keys (relative to x) of the leaves for which test(leaf) holds. A Tree keeps its
    answer per test: a design made by `replace` walks only the branches it changed."""
    if isinstance(x, Tree):
        memo = _memo(x)
        got = memo.get(test)
        if got is None:
            got = memo[test] = tuple(
                join_key(str(k), sub) for k, v in x.items() for sub in leaf_keys(v, test)
            )
        return got
    if isinstance(x, Mapping):
        return tuple(join_key(str(k), sub) for k, v in x.items() for sub in leaf_keys(v, test))
    if isinstance(x, (list, tuple)):
        return tuple(join_key(f"[{i}]", sub) for i, v in enumerate(x) for sub in leaf_keys(v, test))
    return ("",) if test(x) else ()


def cached(node: Any, fn: Callable[[Any], Any]) -> Any:
    """fn(node), kept on a Tree node (whose values never change): a check or a derived value of
    one node, e.g. a chip's operator tables, is worked out once for every design sharing it."""
    if not isinstance(node, Tree):
        return fn(node)
    memo = _memo(node)
    if fn not in memo:
        memo[fn] = fn(node)
    return memo[fn]


def join_key(head: str, sub: str) -> str:
    """`head` and a key below it: a.b, a[0]."""
    if not sub:
        return head
    return f"{head}{sub}" if sub.startswith("[") else f"{head}.{sub}"


def _memo(t: Tree) -> dict:
    try:
        return object.__getattribute__(t, "_memo")
    except AttributeError:
        memo: dict = {}
        object.__setattr__(t, "_memo", memo)
        return memo
