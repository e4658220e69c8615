"""The Hydra app's command line checked before Hydra runs it (`decodelab [OVERRIDES]`, `decodelab -m
...`): a Hydra app cannot catch its own composition errors, and a multirun composes every job
before launching any, so each problem becomes one line (decodelab.config.diagnose) here, for the
single run and for every job of a multirun, before anything runs or is recorded. Config files
and overrides are data (decodelab.config.safety): checked here, before Hydra loads any file (the
composed config is checked again in the run, decodelab.apps.run)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence

from decodelab.config import plan, precomposed, safety
from decodelab.config.diagnose import describe, search_dirs


class _ArgError(Exception):
    pass


def app_args(argv: Sequence[str]):
    """The Hydra app's own command-line arguments (Hydra's parser), or _ArgError."""
    from hydra._internal.utils import get_args_parser

    p = get_args_parser()

    def error(message: str):
        raise _ArgError(message)

    p.error = error  # type: ignore[method-assign]
    return p.parse_args(list(argv))


def check_app(argv: Sequence[str]) -> List[str]:
    """Problems with the Hydra app's command line, one line each (empty: let Hydra run it)."""
    try:
        args = app_args(argv)
    except _ArgError as e:
        return [f"{e} (see decodelab --help)"]
    if args.experimental_rerun:  # Hydra unpickles the file: pickles are code, configs are data
        return [
            f"--experimental-rerun {args.experimental_rerun}: a pickle can run code; give the "
            "run's overrides instead (its .hydra/overrides.yaml)"
        ]
    if args.config_dir and not Path(args.config_dir).is_dir():
        return [f"--config-dir {args.config_dir}: no such directory; give a directory of YAML configs"]
    config_dir = str(Path(args.config_dir).absolute()) if args.config_dir else None
    overrides = list(args.overrides)
    try:
        safety.check_sources(config_dir, overrides, args.config_name or "config")
    except safety.CodeInConfig as e:
        return [str(e)]
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return []
    return _compose_problems(config_dir, args, overrides)


def _compose_problems(config_dir, args, overrides: List[str]) -> List[str]:
    """Every job of the command line composes (one line per problem, else empty)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    import yaml

    dirs = search_dirs(config_dir, overrides)
    try:
        common = tuple(o for o in overrides if plan.is_hydra(o))
    except HydraException as e:
        bad = next((o for o in overrides if not plan.parses(o)), None)
        return [describe(e, override=bad, search_dirs=dirs, syntax=bad is not None)]
    source = plan.Source(config_dir, args.config_name or "config", common)
    if not args.multirun and not args.cfg and args.config_path is None:
        quick = precomposed.check(source, overrides, plan.output_problem)  # one composition
        if quick is not None:
            return quick
    try:
        jobs = plan.jobs_of(source, overrides, multirun=bool(args.multirun))
        if jobs is None:  # a sweeper other than Hydra's basic one: it checks its own jobs
            return []
        plan.check_jobs(source, jobs)
        if not args.cfg:  # a run writes its directory: can it? (said now, not as a traceback)
            return plan.app_output_problems(source, bool(args.multirun))
    except plan.SweepError as e:
        return str(e).splitlines()
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        return [describe(e, search_dirs=dirs)]
    return []
