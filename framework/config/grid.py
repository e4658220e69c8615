"""The Hydra side of `decodelab grid`: a sweep (the sweep file's `hydra.sweeper.params` plus the
command line, as `decodelab sweep` reads them) as axes of values instead of a list of jobs, and
per choice of config groups the composed config as plain dicts with each design's field values.

Job numbers are those of Hydra's basic sweeper (`BasicSweeper.split_arguments`: the product of
the axes in order, a repeated key keeping its first position), so a grid's row `job` is the
`decodelab sweep` / `decodelab -m` job of the same design. A choice whose field overrides do
not map onto plain values (`+`/`~` overrides, a non-scalar value, another field interpolating a
swept one, or a config that differs from Hydra's own for its first job) is marked for the
per-design path with the reason.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from decodelab.config import plan as P
from decodelab.config.sweepfile import SweepError, check_count
from decodelab.config.diagnose import describe, search_dirs
from decodelab.config.fields import interpolated, node_kind, settable, typed_as
from decodelab.core.tree import Tree, freeze, replace


@dataclass
class Axis:
    key: str
    strings: List[str]  # the job override of each value ("key=value", as Hydra's jobs)
    values: List[object]  # Hydra's typed values
    group: bool = False
    plain: bool = True  # a field override that sets a value (not +, ~, ++ or a package)


@dataclass
class Grid:
    source: P.Source
    name: str
    axes: List[Axis]
    sweep_dir: Path
    tracking: Dict = field(default_factory=dict)
    command_line: List[str] = field(default_factory=list)

    @property
    def n_jobs(self) -> int:
        return int(np.prod([len(a.values) for a in self.axes])) if self.axes else 1

    @property
    def varied(self) -> List[str]:
        return [a.key for a in self.axes if len(a.values) > 1]

    def strides(self) -> List[int]:
        sizes = [len(a.values) for a in self.axes]
        return [int(np.prod(sizes[i + 1 :])) for i in range(len(sizes))]

    def choices(self) -> Iterator[Tuple[int, ...]]:
        """Value indices of the group axes, one tuple per choice of config groups, in job order."""
        groups = [range(len(a.values)) for a in self.axes if a.group]
        return itertools.product(*groups)


def make_grid(target: Optional[str], overrides: List[str], max_designs: Optional[int] = None) -> Grid:
    """The axes of `decodelab grid [TARGET] OVERRIDES`, counted before any is listed (at most
    `max_designs`, sweepfile.check_count). Raises SweepError on bad input (the same checks as
    decodelab sweep, on the first job of each choice)."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    import yaml

    P.reset()
    source = P.source_of(target, overrides)
    name, common = source.config_name, source.common
    design = [o for o in overrides if not P.is_hydra(o)]
    with P.hydra_context(source) as loader:
        try:
            probe = compose(config_name=name, overrides=list(common), return_hydra_config=True)
            target_cls = str(OmegaConf.select(probe, "hydra.sweeper._target_") or "")
            if not target_cls.endswith("BasicSweeper"):
                raise SweepError(
                    "decodelab grid runs Hydra's basic sweeper only (use decodelab -m for another)"
                )
            node = OmegaConf.select(probe, "hydra.sweeper.params")
            params = OmegaConf.to_container(node, resolve=False) if node else {}
            parser = OverridesParser.create(config_loader=loader)
            parsed = parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + design)
            check_count(parsed, max_designs)
        except (HydraException, OmegaConfBaseException, yaml.YAMLError, RecursionError) as e:
            bad = next((o for o in overrides if not P.parses(o)), None)
            dirs = search_dirs(source.config_dir, source.common)
            raise SweepError(
                describe(e, loader=loader, override=bad, search_dirs=dirs, syntax=bad is not None)
            ) from None
        sweep_dir = Path(str(OmegaConf.select(probe, "hydra.sweep.dir"))).absolute()
        if P.output_problem(sweep_dir):
            raise SweepError(P.output_problem(sweep_dir))
        composer = P.Composer(source, loader)
        axes: "OrderedDict[str, Axis]" = OrderedDict()
        for o in parsed:
            key = o.get_key_element()
            if o.is_sweep_override():
                if not o.is_discrete_sweep():
                    raise SweepError(
                        f"{key}: decodelab grid sweeps discrete values (a,b,c, range(), choice())"
                    )
                vals, strs = list(o.sweep_iterator()), list(o.sweep_string_iterator())
            else:
                vals, strs = [o.value()], [o.get_value_element_as_str()]
            a = Axis(key, [f"{key}={s}" for s in strs], vals)
            a.group = composer.is_group(a.strings[0])
            a.plain = not (o.is_add() or o.is_delete() or o.is_force_add() or o.package is not None)
            a.plain = a.plain and all(isinstance(v, (int, float, str, bool)) for v in vals)
            axes[key] = a  # a repeated key keeps its first position (BasicSweeper's OrderedDict)
        grid = Grid(source, name if target else "overrides", list(axes.values()), sweep_dir)
        grid.command_line = list(overrides)
        first = [a.strings[0] for a in grid.axes]
        P._check(composer, [first] + [[s] for a in grid.axes for s in a.strings[1:]])
        grid.tracking = OmegaConf.to_container(composer.config(first).tracking, resolve=True)
    swept_tracking = [k for k in grid.varied if k.lstrip("+~").split(".")[0].split("@")[0] == "tracking"]
    if swept_tracking:
        raise SweepError(
            f"{', '.join(swept_tracking)}: a sweep records into one tracker; give tracking one value"
        )
    return grid


@dataclass
class Choice:
    """One choice of config groups: its jobs (numbers), their override strings (lazily), and for
    the array path the plain config, the field keys and each design's values."""

    groups: Tuple[str, ...]
    jobs: np.ndarray
    keys: List[str]
    values: List[np.ndarray]
    base: Optional[Tree] = None
    per_design: str = ""  # why every design of the choice takes the per-design path


def choice_of(grid: Grid, gidx: Tuple[int, ...]) -> Choice:
    """The designs of the choice of config groups `gidx` (composed once, in this process)."""
    from omegaconf import OmegaConf

    strides = grid.strides()
    gaxes = [i for i, a in enumerate(grid.axes) if a.group]
    faxes = [i for i, a in enumerate(grid.axes) if not a.group]
    groups = tuple(grid.axes[i].strings[j] for i, j in zip(gaxes, gidx))
    offset = sum(strides[i] * j for i, j in zip(gaxes, gidx))
    sizes = [len(grid.axes[i].values) for i in faxes]
    mesh = np.indices(sizes).reshape(len(sizes), -1) if faxes else np.zeros((0, 1), dtype=np.int64)
    jobs = offset + sum(
        (strides[i] * mesh[k] for k, i in enumerate(faxes)), np.zeros(mesh.shape[1], dtype=np.int64)
    )
    keys = [grid.axes[i].key for i in faxes]
    c = Choice(groups, jobs, keys, [])
    composer = P.composer(grid.source)
    base_cfg = composer.base(groups)
    base = freeze(OmegaConf.to_container(base_cfg, resolve=True))
    raw = OmegaConf.to_container(base_cfg, resolve=False)
    typed = []
    for k, i in zip(keys, faxes):
        a = grid.axes[i]
        if not a.plain or not settable(base, k):
            c.per_design = f"the override {a.strings[0]} does not set a plain value"
            break
        if interpolated(raw, k):
            c.per_design = f"another field interpolates {k}"
            break
        kind = node_kind(base_cfg, k)  # Hydra's typing of the value, as PlainBase (config.fields)
        vals = [typed_as(kind, v) for v in a.values]
        if any(v is None for v in vals):
            c.per_design = f"Hydra converts or refuses a value of {a.strings[0]}"
            break
        typed.append(vals)
    if not c.per_design:
        c.values = [np.asarray(v, dtype=object)[mesh[k]] for k, v in enumerate(typed)]
        if not _same_as_hydra(composer, groups, grid, faxes, base, typed):
            c.per_design = "the plain config differs from Hydra's"
    if not c.per_design:
        c.base = base
    return c


def _same_as_hydra(composer, groups, grid: Grid, faxes, base, typed) -> bool:
    """The first and last design of the choice, composed by Hydra, equal their plain configs."""
    from omegaconf import OmegaConf

    for j in (0, -1):
        job = list(groups) + [grid.axes[i].strings[j] for i in faxes]
        cfg = composer.config(job)
        mine = replace(base, {grid.axes[i].key: typed[k][j] for k, i in enumerate(faxes)})
        if freeze(OmegaConf.to_container(cfg, resolve=True)) != mine:
            return False
    return True


def overrides_of(grid: Grid, job: int) -> List[str]:
    """The override strings of job number `job` (Hydra's order)."""
    out = []
    for a, s in zip(grid.axes, grid.strides()):
        out.append(a.strings[(job // s) % len(a.values)])
    return out
