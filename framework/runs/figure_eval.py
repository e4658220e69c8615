"""Claim figures as functions of the placeholder parameters: `FigureModel.value(figure id,
{param: value})` evaluates only the designs the figure reads, sets each parameter only on the
designs whose config reads it (its `when`), and caches every design result by the values that
reach it, so a parameter that touches no design of a figure costs nothing. Used by
`decodelab calibrate` (decodelab.runs.calibrate) and `decodelab claims --bands`
(decodelab.runs.bands). Evaluation is the one `decodelab claims` uses (decodelab.runs.claims)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from decodelab.config import compose as C
from decodelab.config import plan as SP
from decodelab.config.sweepfile import load_sweep
from decodelab.modes.resolve import with_fields
from decodelab.modes.dispatch import evaluate
from decodelab.paths import SWEEPS_DIR
from omegaconf import OmegaConf
from decodelab.config.composition import compose_job
from decodelab.runs.claims import _matches, figure_value, with_what_if
from decodelab.runs.placeholders import Param, figure_ids, select

SKIPPED = {"status": "skipped", "reason": "not read by this figure", "metrics": {}}


def design_config(composer, job: List[str]):
    """A job's config as a resolved Tree on the base of its choice of groups where its field
    overrides allow (config.composition.Composer.plain: the sweeps' fast path, ~10x cheaper than
    composing), else as `decodelab claims` composes it (compose_job)."""
    if not any(o.lstrip("+~").startswith("hydra") for o in job):
        try:
            tree = composer.plain(job)
        except Exception:  # noqa: BLE001  (the composition below names what is wrong)
            tree = None
        if tree is not None:
            return tree
    return compose_job(composer, job)


_REF = re.compile(r"^\$\{(\.*)([A-Za-z_][\w.]*)\}$")  # a bare node reference: ${a.b}, ${.a}


def references(raw, key: str, path: str = "") -> List[str]:
    """Dotted paths of the fields of an unresolved config whose value is exactly `${key}` (or a
    relative reference to it)."""
    out = []
    if isinstance(raw, dict):
        for k, v in raw.items():
            out += references(v, key, f"{path}.{k}" if path else str(k))
    elif isinstance(raw, str):
        m = _REF.match(raw)
        if m:
            dots, name = m.groups()
            own = path.split(".")[:-1]
            node = own[: len(own) - len(dots) + 1] if dots else []
            if ".".join(node + [name]) == key:
                out.append(path)
    return out


def _fmt(v) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))


class FigureModel:
    """The claims' figures over parameter assignments (open with `figure_model`)."""

    def __init__(self, todo, params: Dict[str, Param], what_if: Sequence[str] = (), composer=None):
        self.todo = {path: (claim, jobs) for path, claim, jobs in todo}
        self.params = params
        self.what_if = list(what_if)
        self.composer = composer
        self.figs = {f[0]: f for f in figure_ids([(p, c) for p, c, _ in todo])}
        self.points: Dict[str, object] = {}  # param -> its value in the first design that reads it
        self._reads: Dict[str, List[int]] = {}
        self._applies: Dict[Tuple[Path, int], Tuple[str, ...]] = {}
        self._cache: Dict[tuple, dict] = {}
        self._deps: Dict[str, Tuple[str, ...]] = {}
        self.inert: set = set()  # (path, job index, param): the design does not move with it
        self.evals = 0

    def reads(self, fid: str) -> List[int]:
        """Indices of the jobs a figure reads (its `where` and its `times.where`)."""
        if fid not in self._reads:
            _, path, _, fig = self.figs[fid]
            jobs = self.todo[path][1]
            times = (fig.get("times") or {}).get("where", False)
            self._reads[fid] = [
                i
                for i, j in enumerate(jobs)
                if _matches(j, fig.get("where")) or (times is not False and _matches(j, times))
            ]
        return self._reads[fid]

    def applies(self, path: Path, i: int) -> Tuple[str, ...]:
        """The parameters a design's config reads (its `when` holds); records their point values."""
        if (path, i) not in self._applies:
            cfg = design_config(self.composer, with_what_if(self.todo[path][1][i], self.what_if))
            names = tuple(n for n, p in self.params.items() if p.applies(cfg))
            for n in names:
                if n not in self.points:
                    self.points[n] = select(cfg, self.params[n].key)
                    full = compose_job(self.composer, with_what_if(self.todo[path][1][i], self.what_if))
                    self.dependents(n, full)
            self._applies[(path, i)] = names
        return self._applies[(path, i)]

    def touches(self, fid: str) -> List[str]:
        """The parameters any design of the figure reads, in registry order."""
        _, path, _, _ = self.figs[fid]
        seen = {n for i in self.reads(fid) for n in self.applies(path, i)}
        return [n for n in self.params if n in seen]

    def dependents(self, name: str, cfg) -> Tuple[str, ...]:
        """Fields whose YAML value is a bare reference to the parameter's key (`route_fill_us:
        ${.fill_drain_us}`): they follow it when it is set on a resolved design."""
        if name not in self._deps:
            raw = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else None
            self._deps[name] = tuple(references(raw, self.params[name].key)) if raw else ()
        return self._deps[name]

    def result(self, path: Path, i: int, assign: Dict[str, object]) -> dict:
        """One design's result with the parameters it reads (and is not inert to) set: on the
        design's resolved Tree (and the fields that reference them), or through Hydra."""
        setv = tuple(
            (n, assign[n])
            for n in self.applies(path, i)
            if n in assign and assign[n] != self.points.get(n) and (path, i, n) not in self.inert
        )
        follow = {d for n, _ in setv for d in self._deps.get(n, ())}
        setv += tuple(
            (n, assign[n])
            for n in self.applies(path, i)
            if n in assign and self.params[n].key in follow and all(n != m for m, _ in setv)
        )  # a parameter at its point still overrides one that would move it with another
        key = (path, i, setv)
        if key not in self._cache:
            job = with_what_if(self.todo[path][1][i], self.what_if)
            cfg = design_config(self.composer, job)
            if setv and not OmegaConf.is_config(cfg):
                fields = {d: v for n, v in setv for d in self._deps.get(n, ())}
                fields.update({self.params[n].key: v for n, v in setv})  # an explicit value wins
                cfg = with_fields(cfg, fields)
            elif setv:
                extra = [f"{self.params[n].key}={_fmt(v)}" for n, v in setv]
                cfg = compose_job(self.composer, with_what_if(self.todo[path][1][i], self.what_if + extra))
            self._cache[key] = evaluate(cfg, keep_steps=False)
            self.evals += 1
        return self._cache[key]

    def value(self, fid: str, assign: Optional[Dict[str, object]] = None) -> Optional[float]:
        """The figure's simulated value with `assign` (param -> value; the rest at their point)."""
        _, path, _, fig = self.figs[fid]
        claim, jobs = self.todo[path]
        read = set(self.reads(fid))
        results = [self.result(path, i, assign or {}) if i in read else SKIPPED for i in range(len(jobs))]
        return figure_value(fig, jobs, results)


def claim_todo(ids=None, files=None, sweeps_dir: Path = SWEEPS_DIR):
    """(path, claim, jobs) of the claim sweeps `decodelab claims` would run, in its order."""
    paths = files if files is not None else sorted(Path(sweeps_dir).glob("*.yaml"))
    todo = [(p, *load_sweep(p)) for p in paths]
    return [t for t in todo if not ids or t[1]["id"] in ids]


@contextlib.contextmanager
def figure_model(
    params, ids=None, files=None, what_if=(), sweeps_dir: Path = SWEEPS_DIR
) -> Iterator[FigureModel]:
    """A FigureModel on an open Hydra context (the claims' composer)."""
    with C.context():
        yield FigureModel(claim_todo(ids, files, sweeps_dir), params, what_if, SP.context_composer())
