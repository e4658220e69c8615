"""The parameters without a public source (data/calibration.yaml): their ranges, the designs they
touch, the one published figure each may be calibrated on, and the figure ids (`C7`, `C2:1`) that
name a claim's figures.

Design: the values stay in their own YAMLs beside their source comments; this one file holds the
metadata (range, range source, `calibrated_on`). `decodelab calibrate` rewrites the value's line in
place (a targeted edit of that one key, comments kept) and inserts `calibrated_on` into the entry
here; `decodelab claims` reads the entries to label calibration figures and, with --bands, to
propagate the ranges (decodelab.runs.bands)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml

from decodelab.config.diagnose import did_you_mean
from decodelab.errors import ConfigError
from decodelab.paths import CONF_DIR, DATA_DIR

REGISTRY = DATA_DIR / "calibration.yaml"


def select(cfg, key: str):
    """The value at a dotted key of a config (an OmegaConf node or a resolved Tree), or None."""
    for seg in key.split("."):
        try:
            cfg = cfg[seg]
        except Exception:  # noqa: BLE001  (a Tree, or a key this config does not have)
            cfg = getattr(cfg, seg, None)
        if cfg is None:
            return None
    return cfg


@dataclass(frozen=True)
class Param:
    name: str
    key: str
    files: Tuple[str, ...]
    when: Tuple[Tuple[str, Tuple[str, ...]], ...]  # (config key, allowed values as lower-case text)
    lo: float
    hi: float
    range_source: str
    integer: bool = False
    calibrated_on: Optional[dict] = None

    def applies(self, cfg) -> bool:
        """Whether a composed config reads this parameter (every `when` condition holds)."""
        return all(str(select(cfg, k)).lower() in vals for k, vals in self.when)

    def cast(self, x: float):
        return int(round(x)) if self.integer else float(x)


def _param(name: str, e: dict, path: Path) -> Param:
    missing = [k for k in ("key", "files", "range", "range_source") if k not in (e or {})]
    if missing:
        raise ConfigError(f"{path}: parameters.{name} lacks {', '.join(missing)}")
    lo, hi = (float(x) for x in e["range"])
    if not lo < hi:
        raise ConfigError(f"{path}: parameters.{name}.range={e['range']}: give [low, high] with low < high")
    when = tuple(
        (k, tuple(str(x).lower() for x in (v if isinstance(v, list) else [v])))
        for k, v in (e.get("when") or {}).items()
    )
    cal = e.get("calibrated_on")
    if cal is not None and not {"figure", "value"} <= set(cal):
        raise ConfigError(f"{path}: parameters.{name}.calibrated_on needs figure and value")
    return Param(
        name, e["key"], tuple(e["files"]), when, lo, hi, str(e["range_source"]), bool(e.get("integer")), cal
    )


def load_params(path: Path = REGISTRY) -> Dict[str, Param]:
    """The entries of the registry file (name -> Param); ConfigError naming a bad entry."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    return {n: _param(n, e, Path(path)) for n, e in (data.get("parameters") or {}).items()}


def resolve_param(word: str, params: Dict[str, Param]) -> Param:
    """An entry by its name, or by its config key when exactly one entry has that key."""
    if word in params:
        return params[word]
    by_key = [p for p in params.values() if p.key == word]
    if len(by_key) == 1:
        return by_key[0]
    if by_key:
        names = " ".join(p.name for p in by_key)
        raise ConfigError(f"{word}: more than one placeholder has this key; name one: {names}")
    near = did_you_mean(word, list(params) + [p.key for p in params.values()])
    raise ConfigError(
        f"{word}: not a placeholder parameter of {REGISTRY.name}{near} (the names: {' '.join(params)})"
    )


def calibration_figures(params: Dict[str, Param]) -> Dict[str, str]:
    """Figure id -> the parameter calibrated on it."""
    return {str(p.calibrated_on["figure"]): p.name for p in params.values() if p.calibrated_on}


# --- figure ids: `ID` for a claim of one figure, else `ID:N` (N from 1, in `decodelab claims` order) ---


def figure_ids(claims: List[Tuple[Path, dict]]) -> List[Tuple[str, Path, int, dict]]:
    """(figure id, sweep path, index in the sweep's figures, figure) of every figure of the claims,
    given as (path, claim block) in the order `decodelab claims` runs them."""
    count: Dict[str, int] = {}
    out = []
    for path, claim in claims:
        for i, fig in enumerate(claim["figures"]):
            cid = str(claim["id"])
            count[cid] = count.get(cid, 0) + 1
            out.append((f"{cid}:{count[cid]}", path, i, fig))
    return out


def resolve_figure(word: str, figs: List[Tuple[str, Path, int, dict]]) -> Tuple[str, Path, int, dict]:
    """A figure by `ID:N`, or by `ID` when that claim has exactly one figure."""
    exact = [f for f in figs if f[0] == word]
    if exact:
        return exact[0]
    of_claim = [f for f in figs if f[0].split(":")[0] == word]
    if len(of_claim) == 1:
        return of_claim[0]
    if of_claim:
        names = "; ".join(f"{f[0]} ({f[3]['name']})" for f in of_claim)
        raise ConfigError(f"{word}: the claim has {len(of_claim)} figures; name one as ID:N: {names}")
    ids = sorted({f[0].split(":")[0] for f in figs}, key=lambda c: (len(c), c))
    raise ConfigError(f"{word}: not a claim figure (ID or ID:N); the ids: {' '.join(ids)}")


# --- writing a calibration: the value's line in its YAMLs, and calibrated_on in the registry ---


def _value_line(lines: List[str], path: List[str]) -> Optional[int]:
    """The index of the line holding the nested key `path` (block-style YAML, indentation)."""
    start, indent = 0, -1
    for depth, seg in enumerate(path):
        pat = re.compile(rf"^(\s*){re.escape(seg)}:(\s|$)")
        for i in range(start, len(lines)):
            m = pat.match(lines[i])
            if m and len(m.group(1)) > indent:
                start, indent = i + 1, len(m.group(1))
                if depth == len(path) - 1:
                    return i
                break
            if (
                lines[i].strip()
                and not lines[i].lstrip().startswith("#")
                and depth
                and (len(lines[i]) - len(lines[i].lstrip()) <= indent)
            ):
                return None  # left the parent block
        else:
            return None
    return None


def value_edits(
    p: Param, value, conf_dir: Path = CONF_DIR, note: str = ""
) -> List[Tuple[Path, int, str, str]]:
    """(file, line number, old line, new line) setting `value` in each of the entry's files that
    holds the key itself (a file inheriting it is left alone); `note` is added to its comment."""
    rel = p.key.split(".")[1:]  # the key inside its group's file
    out = []
    for f in p.files:
        path = conf_dir / f
        lines = path.read_text().splitlines()
        i = _value_line(lines, rel)
        if i is None:
            continue
        m = re.match(r"^(\s*[^:]+:\s*)(\S[^#]*?|)(\s*)(#.*)?$", lines[i])
        comment = (
            f"{m.group(4)}; {note}" if m.group(4) and note else m.group(4) or (f"# {note}" if note else "")
        )
        new = f"{m.group(1)}{value}{m.group(3) or '  '}{comment}".rstrip()
        out.append((path, i + 1, lines[i], new))
    return out


def calibrated_line(figure: str, value, date: str) -> str:
    return f'    calibrated_on: {{figure: "{figure}", value: {value}, date: "{date}"}}'


def registry_edit(name: str, line: str, path: Path = REGISTRY) -> Tuple[int, str]:
    """(line number after which to insert, the line): the end of the entry's block."""
    lines = path.read_text().splitlines()
    head = lines.index(f"  {name}:")
    end = head + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    return end, line


def apply_edits(edits, reg: Tuple[int, str], path: Path = REGISTRY) -> None:
    for f, n, _, new in edits:
        lines = f.read_text().splitlines(keepends=True)
        lines[n - 1] = new + "\n"
        f.write_text("".join(lines))
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(reg[0], reg[1] + "\n")
    path.write_text("".join(lines))


def current_value(p: Param, conf_dir: Path = CONF_DIR) -> str:
    """The value as written on its line in the entry's first file that holds it."""
    for f in p.files:
        lines = (conf_dir / f).read_text().splitlines()
        i = _value_line(lines, p.key.split(".")[1:])
        if i is not None:
            return lines[i].split(":", 1)[1].split("#")[0].strip()
    return "-"


def markdown_table(params: Dict[str, Param], points: Optional[Dict[str, object]] = None) -> str:
    """The calibration table (`decodelab calibrate --table`; docs/claims.md, "Placeholders and
    calibrated parameters"): param, value, calibrated on, range, range source
    (values as written in their YAMLs unless `points` gives them)."""
    points = points if points is not None else {n: current_value(p) for n, p in params.items()}
    rows = [
        "| parameter | key | value | calibrated on | range | source of range |",
        "|---|---|---|---|---|---|",
    ]
    for p in params.values():
        cal = p.calibrated_on
        on = f"{cal['figure']} ({cal.get('date', '')})" if cal else "- (placeholder)"
        rows.append(
            f"| {p.name} | `{p.key}` | {points.get(p.name, '-')} | {on} | {p.lo:g}-{p.hi:g} | {p.range_source} |"
        )
    return "\n".join(rows)
