"""Overrides parsed once (`parse`) and field overrides set on plain values: which dotted keys a composed config lets a plain value
replace without Hydra (a scalar field that no other field interpolates), shared by the grid
(config/grid.py) and the per-design fast path (config/composition.py PlainBase)."""

from __future__ import annotations

import re
from typing import Dict

_PARSED: Dict[str, object] = {}


def parse(override: str):
    """One override string, parsed by Hydra (cached: a sweep repeats the same few strings)."""
    o = _PARSED.get(override)
    if o is None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        o = _PARSED[override] = OverridesParser.create().parse_override(override)
    return o


def get_field(cfg, key: str):
    """The value at dotted `key` (KeyError / TypeError where there is none)."""
    node = cfg
    for p in key.split("."):
        node = node[p]
    return node


def settable(cfg, key: str) -> bool:
    """Whether `key` names a scalar field of cfg."""
    try:
        v = get_field(cfg, key)
    except (KeyError, TypeError):
        return False
    return isinstance(v, (int, float, str, bool))


_REF = re.compile(r"\$\{(\.*)([A-Za-z_][\w.]*)\}")  # a plain node reference ${a.b}, ${.a} (relative)


def interpolated(raw, key: str) -> bool:
    """Does any string of the unresolved config interpolate `key` or a node above it (which copies
    it)? Node references are read from every `${...}`, those inside a resolver's arguments too
    (`${below:${hardware.peak_tflops_fp4},1,a,b}` reads hardware.peak_tflops_fp4, not the other
    hardware fields); a relative one (`${.x}`) is taken from its own node."""
    stack = [("", raw)]
    while stack:
        path, x = stack.pop()
        if isinstance(x, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((path, v) for v in x)
        elif isinstance(x, str) and "${" in x:
            for dots, name in _REF.findall(x):
                ref = name
                if dots:  # relative: one dot is the string's own node, each more one level up
                    parts = path.split(".")
                    base = parts[: max(len(parts) - len(dots), 0)]
                    ref = ".".join(base + [name]) if base else name
                if ref == key or key.startswith(ref + "."):
                    return True
    return False


def node_kind(cfg, key: str) -> str:
    """The class name of the OmegaConf value node at dotted `key` (FloatNode, IntegerNode,
    StringNode, BooleanNode, AnyNode, ...): how Hydra's typed schema takes a value set there."""
    node = cfg
    for p in key.split("."):
        node = node._get_node(p)
    return type(node).__name__


def typed_as(kind: str, value):
    """`value` as Hydra sets it on a node of `kind` where that is plain (an int on a FloatNode
    becomes a float); None where only Hydra can say (a conversion, a refusal, another node)."""
    if isinstance(value, bool):
        return value if kind in ("BooleanNode", "AnyNode") else None
    if kind == "FloatNode" and type(value) in (int, float):
        return float(value)
    if kind == "IntegerNode" and type(value) is int:
        return value
    if kind == "StringNode" and type(value) is str:
        return value
    if kind == "AnyNode" and type(value) in (int, float, str):
        return value
    return None
