"""The Hydra side of fast sweeps (`decodelab sweep`, `decodelab search`): the list of jobs of a
sweep, exactly as `decodelab -m` would launch them, and their configs, composed cheaply.

- Jobs: the sweep file's `hydra.sweeper.params` plus the command line, expanded by Hydra's own
  basic sweeper (`BasicSweeper.split_arguments`): the same jobs, in the same order (job number =
  Hydra's `hydra.job.num`).
- Configs: Hydra composes (~0.1 s) once per distinct choice of config groups (`model=...`,
  `hardware=...`); the field overrides of each job (`workload.batch_size=8`) are then applied to a
  copy of that config with Hydra's own override semantics (typed, `+`/`++`/`~`), ~5 ms.
- `prepare` gives each job's config (or the one-line reason it does not compose); evaluating and
  writing are decodelab.runs.items. The composition itself (Source, Composer, the per-process
  Hydra context) is decodelab.config.composition, re-exported here.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from decodelab.config import schema  # noqa: F401  (registers the typed schemas)
from decodelab.config.composition import (  # noqa: F401  (re-exported: plan.composer, plan.prepare, ...)
    Composer,
    Source,
    composer,
    context_composer,
    hydra_context,
    is_hydra,
    one_line,
    parse,
    prepare,
    reset,
)
from decodelab.config.sweepfile import SweepError, check_count, find_sweep  # noqa: F401  (re-exported)
from decodelab.config import derive, safety
from decodelab.config import values as V
from decodelab.config.diagnose import describe, did_you_mean, listing, search_dirs
from decodelab.config.values import user_file_problems


@dataclass
class Plan:
    source: Source
    name: str
    jobs: List[List[str]]  # override strings per job
    groups: List[Tuple[str, ...]]  # config-group overrides per job
    sweep_dir: Path
    varied: List[str] = field(default_factory=list)  # keys with more than one value
    tracking: Dict = field(default_factory=dict)  # tracking node of the first job
    base_cfg: object = None  # first job's group choice, composed
    command_line: List[str] = field(default_factory=list)  # the overrides given
    bases: Dict[tuple, bytes] = field(default_factory=dict)  # choice of groups -> config (config.derive)
    known_groups: Dict[str, bool] = field(default_factory=dict)  # override key -> names a group


# --------------------------------------------------------------------------- planning


def jobs_of(
    source: Source,
    overrides: Sequence[str],
    multirun: bool = True,
    limit: Optional[int] = None,
    keep: Optional[Dict] = None,
) -> Optional[List[List[str]]]:
    """The jobs `decodelab [-m] OVERRIDES` runs from `source`: with -m, the sweep file's
    `hydra.sweeper.params` and the command line expanded by Hydra's basic sweeper (None for
    another sweeper, which expands its own), counted first (at most `limit` designs,
    sweepfile.check_count); without, the one job. Raises SweepError. `keep`: gets the primary
    config composed with its hydra node (`probe`), for the caller."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    import yaml

    design = [o for o in overrides if not is_hydra(o)]
    dirs = search_dirs(source.config_dir, source.common)
    with hydra_context(source) as loader:
        try:
            from hydra import compose

            if not multirun:
                for o in design:
                    if parse(o).is_sweep_override():
                        raise SweepError(describe(ValueError(f"Ambiguous value for argument '{o}'")))
                return [design]
            probe = compose(
                config_name=source.config_name, overrides=list(source.common), return_hydra_config=True
            )
            if keep is not None:
                keep["probe"] = probe
            target = str(OmegaConf.select(probe, "hydra.sweeper._target_") or "")
            if not target.endswith("BasicSweeper"):
                return None
            node = OmegaConf.select(probe, "hydra.sweeper.params")
            params = OmegaConf.to_container(node, resolve=False) if node else {}
            parser = OverridesParser.create(config_loader=loader)
            parsed = parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + design)
            check_count(parsed, limit)
            return BasicSweeper.split_arguments(parsed, None)[0]
        except (HydraException, OmegaConfBaseException, yaml.YAMLError, RecursionError) as e:
            bad = next((o for o in overrides if not parses(o)), None)
            raise SweepError(
                describe(e, loader=loader, override=bad, search_dirs=dirs, syntax=bad is not None)
            ) from None


def source_of(target: Optional[str], overrides: List[str]) -> "Source":
    """Where the jobs of `decodelab sweep|grid [TARGET] OVERRIDES` compose from: the sweep file's
    folder and name (else conf/ and `config`) and the overrides every job shares (hydra.*).
    Raises SweepError on bad override syntax."""
    from hydra.errors import HydraException

    if target:
        path = find_sweep(target)
        source_dir, name = str(path.parent), path.stem
    else:
        source_dir, name = None, "config"
    try:
        common = tuple(o for o in overrides if is_hydra(o))
    except HydraException as e:
        raise SweepError(
            describe(e, override=next((o for o in overrides if not parses(o)), None), syntax=True)
        ) from None
    safety.check_sources(source_dir, overrides, name)  # config files are data (config.safety)
    return Source(source_dir, name, common)


def make_plan(target: Optional[str], overrides: List[str], max_designs: Optional[int] = None) -> Plan:
    """The jobs of `decodelab sweep [TARGET] OVERRIDES` (at most `max_designs`, else
    $DECODELAB_MAX_DESIGNS or sweepfile.MAX_DESIGNS). Raises SweepError on bad input."""
    from omegaconf import OmegaConf

    reset()
    source = source_of(target, overrides)
    name = source.config_name
    kept: Dict = {}
    jobs = jobs_of(source, overrides, limit=max_designs, keep=kept)
    if jobs is None:
        raise SweepError("decodelab sweep runs Hydra's basic sweeper only (use decodelab -m for another)")
    probe = kept["probe"]  # the primary config with its hydra node, composed once
    with hydra_context(source) as loader:
        sweep_dir = Path(str(OmegaConf.select(probe, "hydra.sweep.dir"))).absolute()
        problem = output_problem(sweep_dir)
        if problem:
            raise SweepError(problem)
        composer = Composer(source, loader)
        _check(composer, jobs)
        first = composer.config(jobs[0])
        groups = [composer.split(job)[0] for job in jobs]
        shared = derive.bases(composer, groups[0], groups, derive.config_dirs(probe))
    values: Dict[str, set] = {}
    for job in jobs:
        for o in job:
            k, _, v = o.partition("=")
            values.setdefault(k, set()).add(v)
    varied = [k for k, v in values.items() if len(v) > 1]
    swept_tracking = [k for k in varied if k.lstrip("+~").split(".")[0].split("@")[0] == "tracking"]
    if swept_tracking:
        raise SweepError(
            f"{', '.join(swept_tracking)}: a sweep records into one tracker; "
            "give tracking settings one value (run one sweep per store)"
        )
    label = name if target else "overrides"
    return Plan(
        source,
        label,
        jobs,
        groups,
        sweep_dir,
        varied,
        OmegaConf.to_container(first.tracking, resolve=True),
        first,
        list(overrides),
        shared,
        composer.known_groups(),
    )


def output_problem(path: Path) -> Optional[str]:
    """Why results cannot be written under `path` (its first existing ancestor is a file, or not
    writable), else None: said before anything runs, instead of a traceback half way."""
    p = Path(path).absolute()
    for parent in (p, *p.parents):
        if not parent.exists():
            continue
        how = "choose another with hydra.run.dir=DIR / hydra.sweep.dir=DIR"
        if not parent.is_dir():
            return f"{path}: cannot write results there: {parent} is a file, not a directory; {how}"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{path}: cannot write results there: {parent} is not writable; {how}"
        return None
    return None


def app_output_problems(source: Source, multirun: bool) -> List[str]:
    """The run (or multirun) directory of `decodelab [-m] ...` can be written (see output_problem)."""
    from hydra import compose
    from omegaconf import OmegaConf

    with hydra_context(source):
        probe = compose(
            config_name=source.config_name, overrides=list(source.common), return_hydra_config=True
        )
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        problem = output_problem(Path(str(OmegaConf.select(probe, key))))
    return [problem] if problem else []


def parses(override: str) -> bool:
    from hydra.errors import HydraException

    try:
        parse(override)
        return True
    except HydraException:
        return False


def check_jobs(source: Source, jobs: List[List[str]]) -> None:
    """Every job of `jobs` composes from `source` (SweepError, one line per problem, if not)."""
    with hydra_context(source) as loader:
        _check(Composer(source, loader), jobs)


def _check(comp: Composer, jobs: List[List[str]]) -> None:
    """Every group choice exists and its YAML composes, and every distinct field override applies
    to the first job's config, as Hydra checks a multirun before launching it. Composes the first
    job's groups once, and each group option the first job does not use once more."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    import yaml

    failing = (HydraException, OmegaConfBaseException, yaml.YAMLError, RecursionError)
    dirs = search_dirs(comp.source.config_dir, comp.source.common)
    errors: List[str] = []

    def reference():  # the primary config, for the field lists of a message
        try:
            return comp.base(())
        except failing:
            return None

    def composes(groups: Tuple[str, ...], override: Optional[str] = None) -> bool:
        try:
            comp.base(groups)
            return True
        except failing as e:
            errors.append(describe(e, reference(), comp.loader, override, dirs))
            return False

    first_groups = comp.split(jobs[0])[0]
    seen = set()
    for job in jobs:
        for o in job:
            if o in seen or not comp.is_group(o):
                continue
            seen.add(o)
            p = parse(o)
            if p.is_delete():
                continue
            options = comp.options(p.key_or_group)
            value = p.value()
            if isinstance(value, str) and value not in options:
                errors.append(
                    f"{p.key_or_group}={value}: no such option{did_you_mean(value, options)} "
                    f"({p.key_or_group} options: {listing(options)})"
                )
            elif not isinstance(value, (str, list)):
                errors.append(
                    f"{o}: {p.key_or_group} takes an option name, not {value!r} "
                    f"({p.key_or_group} options: {listing(options)})"
                )
    errors += user_file_problems(comp, jobs)
    if errors:
        raise SweepError("\n".join(dict.fromkeys(errors)))
    if not composes(first_groups):  # which option's YAML (a user's file may be broken)?
        errors.clear()
        for o in first_groups:
            composes((o,), o)
        if not errors:
            composes(first_groups)
    for o in sorted(seen - set(first_groups)):  # the options only later jobs use
        composes((o,), o)
    if errors:
        raise SweepError("\n".join(dict.fromkeys(errors)))
    for groups in [first_groups] + [(o,) for o in sorted(seen - set(first_groups))]:
        errors += V.resolved_problems(comp, groups, comp.base(groups))
    base = comp.base(first_groups)
    for o in sorted({o for job in jobs for o in comp.split(job)[1]}):
        try:
            cfg = copy.deepcopy(base)
            ConfigLoaderImpl._apply_overrides_to_config([parse(o)], cfg)
        except failing as e:
            errors.append(describe(e, base, comp.loader, o, dirs))
            continue
        errors += V.override_problems(o, parse(o), base, cfg)
    if errors:
        raise SweepError("\n".join(dict.fromkeys(errors)))


def write_plan(plan: Plan) -> None:
    """The sweep directory's description: what `decodelab sync` and a re-run need."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    (plan.sweep_dir / "sweep.json").write_text(
        json.dumps(
            {
                "name": plan.name,
                "config_dir": plan.source.config_dir,
                "config_name": plan.source.config_name,
                "common": list(plan.source.common),
                "n_jobs": len(plan.jobs),
                "varied": plan.varied,
            },
            indent=1,
        )
    )
