"""Bad configuration input as one line each: Hydra's and OmegaConf's composition errors (unknown
group option, unknown field, wrong type, broken YAML, a missing config directory) translated into
a sentence naming the field or file and what is allowed, with a "did you mean" for near misses.

Used by decodelab.config.check (the Hydra app's command line, checked before Hydra runs it) and
decodelab.config.plan (the sweep runner), so both say the same thing."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from decodelab.paths import CONF_DIR

_OPTIONS_SHOWN = 40  # a field list longer than this is cut with "..."


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{near[0]}'?" if near else ""


def listing(choices: Sequence[str]) -> str:
    shown = list(choices)[:_OPTIONS_SHOWN]
    more = ", ..." if len(choices) > _OPTIONS_SHOWN else ""
    return ", ".join(shown) + more


def _omegaconf_error(e: BaseException) -> Optional[BaseException]:
    """The OmegaConf error behind a Hydra error (its cause or context), if any."""
    from omegaconf.errors import OmegaConfBaseException

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, OmegaConfBaseException) and getattr(e, "full_key", None):
            return e
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def _node(cfg, key: str):
    """(parent DictConfig, leaf name) of a dotted key in `cfg`, or (None, leaf)."""
    from omegaconf import DictConfig, OmegaConf

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    return (parent if isinstance(parent, DictConfig) else None), leaf


def expected(cfg, key: str) -> str:
    """What a typed field of `cfg` accepts, in words."""
    from omegaconf import BooleanNode, EnumNode, FloatNode, IntegerNode, StringNode

    parent, leaf = _node(cfg, key)
    node = parent._get_node(leaf) if parent is not None and leaf in parent else None
    if isinstance(node, BooleanNode):
        return "true or false"
    if isinstance(node, IntegerNode):
        return "an integer (no decimal point, not nan or inf)"
    if isinstance(node, FloatNode):
        return "a number"
    if isinstance(node, EnumNode):
        return "one of " + ", ".join(m.name for m in node.validate_and_convert.__self__.enum_type)
    if isinstance(node, StringNode):
        return "a string"
    return "a value of the field's type"


def _field_problem(err: BaseException, ref_cfg, value: Optional[str] = None) -> str:
    """An OmegaConf key or type error as `KEY...: problem; allowed`."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    key = str(err.full_key)
    if isinstance(err, (ConfigKeyError, ConfigAttributeError)):
        parent, leaf = _node(ref_cfg, key) if ref_cfg is not None else (None, key.rpartition(".")[2])
        if parent is None and ref_cfg is not None and "." not in key:
            parent = ref_cfg
        fields = sorted(str(k) for k in parent.keys()) if parent is not None else []
        where = key.rpartition(".")[0] or "the config"
        allowed = f" (fields of {where}: {listing(fields)})" if fields else ""
        return f"{key}: no such field{did_you_mean(leaf, fields)}{allowed}"
    if isinstance(err, ValidationError):
        m = re.search(r"Value '([^']*)'", str(err))
        got = value if value is not None else (m.group(1) if m else "?")
        if not got.isprintable():  # a line break or control character (U+0085 ...) stays on one line
            got = repr(got)
        what = expected(ref_cfg, key) if ref_cfg is not None else "a value of the field's type"
        return f"{key}={got}: wrong type, expected {what}"
    return f"{key}: {str(err).strip().splitlines()[0]}"


def _config_file(name: str, search_dirs: Sequence[str]) -> str:
    for d in search_dirs:
        p = Path(d) / f"{name}.yaml"
        if p.is_file():
            return str(p)
    return f"{name}.yaml"


def describe(
    e: BaseException,
    ref_cfg=None,
    loader=None,
    override: Optional[str] = None,
    search_dirs: Sequence[str] = (),
    syntax: bool = False,
) -> str:
    """One line for a config that does not compose (Hydra, OmegaConf or YAML error); syntax=True:
    `override` did not parse."""
    import yaml
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(e, RecursionError):
        return defaults_cycle(search_dirs)
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    if isinstance(e, yaml.YAMLError):
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.name} line {mark.line + 1} column {mark.column + 1}" if mark else "a YAML file"
        problem = getattr(e, "problem", None) or first
        return f"{where}: broken YAML ({problem}); fix the file's syntax"
    if isinstance(e, MissingConfigException):
        m = re.search(r"Could not find '([^']+)/([^']+)'", text)
        if m:
            group, option = m.groups()
            options = list(loader.get_group_options(group)) if loader is not None else []
            if not options:
                options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], re.M)
            return (
                f"{group}={option}: no such option{did_you_mean(option, options)} "
                f"({group} options: {listing(options)})"
            )
        m = re.search(r"Cannot find primary config '([^']+)'", text)
        if m:
            names = sorted({p.stem for d in search_dirs for p in Path(d).glob("*.yaml")})
            return f"--config-name {m.group(1)}: no such config{did_you_mean(m.group(1), names)}" + (
                f" (configs: {listing(names)})" if names else ""
            )
        m = re.search(r"Check that the config directory '([^']+)'", text)
        if m:
            return f"--config-dir {m.group(1)}: no such directory; give a directory of YAML configs"
        return first
    if syntax or isinstance(e, OverrideParseException):
        return (
            f"{override or 'override'}: not a valid override ({first}); the forms are KEY=VALUE, "
            "+KEY=VALUE, ~KEY, GROUP=OPTION (https://hydra.cc/docs/advanced/override_grammar/basic)"
        )
    if first.startswith("Ambiguous value for argument"):
        arg = re.search(r"argument '(.*)'$", first)
        return (
            f"{arg.group(1) if arg else override}: several values sweep only with -m "
            "(decodelab -m ...); for a list write KEY=[a,b], for a string quote it"
        )
    inner = _omegaconf_error(e)
    m = re.match(r"In '([^']+)': \w+ raised while composing config", first)
    if m:  # an error inside a YAML file (a user's config): name the file
        where = _config_file(m.group(1), search_dirs)
        if inner is not None:
            return f"{where}: {_field_problem(inner, ref_cfg)}"
        return f"{where}: {' '.join(text.splitlines()[1:2]) or first}"
    if inner is not None:
        value = override.partition("=")[2] if override and "=" in override else None
        return _field_problem(inner, ref_cfg, value)
    return first


def _defaults_of(path: Path) -> List[str]:
    """The config files a YAML's `defaults` list names (`name`, `/group/name`, `group: name`)."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    out = []
    for d in raw.get("defaults") or [] if isinstance(raw, dict) else []:
        if isinstance(d, dict) and len(d) == 1:
            ((g, n),) = d.items()
            d = f"/{str(g).split('@')[0].replace('override ', '').strip()}/{n}"
        if isinstance(d, str) and d != "_self_":
            out.append(d)
    return out


def defaults_cycle(dirs: Sequence[str]) -> str:
    """The line for a RecursionError while composing: a YAML whose defaults list includes itself,
    directly or through other files (found by following the user's files' defaults lists)."""
    roots = [Path(d) for d in dirs if Path(d).resolve() != Path(CONF_DIR).resolve()]
    for root in roots:
        for start in sorted(root.rglob("*.yaml")):
            chain, here = [start], start
            while True:
                names = _defaults_of(here)
                nxt = None
                for n in names:
                    rel = n.lstrip("/") if n.startswith("/") else str(here.parent.relative_to(root) / n)
                    cand = [Path(r) / f"{rel}.yaml" for r in roots] + [Path(CONF_DIR) / f"{rel}.yaml"]
                    nxt = next((c for c in cand if c.is_file()), None)
                    if nxt is not None:
                        break
                if nxt is None:
                    break
                if nxt in chain:
                    loop = " -> ".join(str(p) for p in chain[chain.index(nxt) :] + [nxt])
                    return f"{nxt}: its defaults list includes itself ({loop}); remove the cycle"
                chain.append(nxt)
                here = nxt
    return "a config's defaults list includes itself (a cycle through its defaults); remove the cycle"


def search_dirs(config_dir: Optional[str], overrides: Sequence[str] = ()) -> List[str]:
    """Where config files are looked up: --config-dir, hydra.searchpath entries, conf/."""
    extra = []
    for o in overrides:
        if o.lstrip("+").startswith("hydra.searchpath="):
            extra += re.findall(r"file://([^,\]\s]+)", o)
    return [str(d) for d in (config_dir, *extra, CONF_DIR) if d]


def unparsable(overrides: Sequence[str]) -> Optional[str]:
    """The first override Hydra's parser rejects, if any."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_override(o)
        except HydraException:
            return o
    return None
