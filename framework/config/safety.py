"""Config files are data (issue 40): reading a config must never run code. Hydra instantiates
`hydra.callbacks` entries, the launcher and the sweeper by their `_target_`, configures logging
with `class` / `()` factories and `ext://` objects, and exports `hydra.job.env_set` into the job's
environment; a model YAML with `# @package _global_` on a search path can set any of them. So
every YAML file of a user's config directories (`--config-dir`, `hydra.searchpath`, a sweep
file's folder) and every command-line override is checked before Hydra composes anything, and
the composed config again before Hydra instantiates its callbacks (decodelab.config.check):

- `_target_` only from the allow-list below (the project's callback, the launchers and sweepers
  it documents); `_args_`, `_partial_`, `_recursive_`, `_convert_` never;
- logging `class` / `()` only the standard handlers and formatters; `ext://` only sys.stdout and
  sys.stderr;
- `env_set` / Ray `env_vars` only thread-count variables; Ray's `runtime_env` only its
  working_dir; no submitit `setup` lines, no line breaks in launcher values (job scripts);
- a config group put into Hydra's own config (`model@hydra.job=...`);
- YAML aliases that expand a file by more than MAX_ALIAS_NODES nodes (a "billion laughs" file),
  or refer to themselves, found on the node graph before anything is expanded.

Each is one line naming the file (or the command line) and the key: CodeInConfig, both a
SweepError (the sweep runners report it) and a ConfigError (the Python API raises it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from decodelab.config.fields import parse
from decodelab.config.sweepfile import SweepError
from decodelab.errors import ConfigError
from decodelab.paths import CONF_DIR

CALLBACK_TARGETS = frozenset({"decodelab.apps.callbacks.MLflowCallback"})
LAUNCHER_TARGETS = frozenset(
    {
        "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
        "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
        "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher",
    }
)
SWEEPER_TARGETS = frozenset({"hydra._internal.core_plugins.basic_sweeper.BasicSweeper"})
INSTANTIATION_KEYS = frozenset({"_args_", "_partial_", "_recursive_", "_convert_"})
LOGGING_CLASSES = frozenset(
    {
        "logging.Formatter",
        "logging.Filter",
        "logging.StreamHandler",
        "logging.FileHandler",
        "logging.NullHandler",
        "logging.handlers.RotatingFileHandler",
        "logging.handlers.TimedRotatingFileHandler",
        "logging.handlers.WatchedFileHandler",
        "colorlog.ColoredFormatter",
    }
)
EXT_OBJECTS = frozenset({"ext://sys.stdout", "ext://sys.stderr"})
ENV_NAMES = frozenset(
    {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "NUMBA_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
    }
)
RUNTIME_ENV_KEYS = frozenset({"working_dir", "excludes", "env_vars"})
MAX_ALIAS_NODES = 100_000  # nodes YAML aliases may add to one file (a config has < 10,000)
MAX_FILES, MAX_DEPTH = 5_000, 4  # a config directory's YAML files scanned, and how deep
SKIP_DIRS = frozenset({"outputs", "multirun", "mlruns", "mlartifacts", "__pycache__", "node_modules"})
DATA = 'config files are data (docs/extending.md, "Your own config directory")'
# where a _target_ may be (the key above it, or two above for a callback) and what it may name
TARGETS = {"callbacks": CALLBACK_TARGETS, "launcher": LAUNCHER_TARGETS, "sweeper": SWEEPER_TARGETS}


class CodeInConfig(SweepError, ConfigError):
    """A config that would run code or expand without bound: one line, file (or override) and key."""


# --------------------------------------------------------------------------- the rules


def _allowed(values) -> str:
    return ", ".join(sorted(values))


def problem(path: Tuple[str, ...], value: Any) -> Optional[str]:
    """Why the value at key `path` would run code (None: it is data)."""
    key = path[-1] if path else ""
    parent = path[-2] if len(path) > 1 else ""
    if key == "_target_":
        allowed = TARGETS.get(parent if parent in TARGETS else (path[-3] if len(path) > 2 else ""), ())
        if not isinstance(value, str) or value not in allowed:
            if not allowed:
                return (
                    "a _target_ names code to run (only hydra.callbacks, launcher and sweeper may have one)"
                )
            return f"a _target_ names code to run; allowed here: {_allowed(allowed)}"
    elif key in INSTANTIATION_KEYS:
        return "an instantiation key (only decodelab's own code instantiates)"
    elif key in ("class", "()") and (not isinstance(value, str) or value not in LOGGING_CLASSES):
        return f"a logging factory names code to run; allowed: {_allowed(LOGGING_CLASSES)}"
    elif parent in ("env_set", "env_vars") and key not in ENV_NAMES:
        return f"sets the job's environment (which can load code); allowed: {_allowed(ENV_NAMES)}"
    elif parent == "runtime_env" and key not in RUNTIME_ENV_KEYS:
        return f"a Ray runtime_env entry that installs or runs code; allowed: {_allowed(RUNTIME_ENV_KEYS)}"
    elif parent == "launcher" and key == "setup" and value:
        return "shell lines a launcher runs before each job"
    if isinstance(value, str):
        if value.startswith("ext://") and value not in EXT_OBJECTS:
            return f"an ext:// object is imported code; allowed: {_allowed(EXT_OBJECTS)}"
        if "launcher" in path and ("\n" in value or "\r" in value):
            return "a line break in a launcher value (it would be a line of the job script)"
    if parent == "defaults" and "@" in key and into_hydra(*key.split("@", 1)):
        return "puts a config group into Hydra's own config"
    return None


def into_hydra(group: str, package: Optional[str]) -> bool:
    """Whether a defaults entry or override `group@package` puts a non-Hydra group into `hydra`."""
    group = group.strip().removeprefix("override ").strip().lstrip("/")
    package = (package or "").strip().removeprefix("_global_").lstrip(".")
    return package.split(".")[0] == "hydra" and not group.startswith("hydra/")


def _segments(key: Any) -> Tuple[str, ...]:
    """A key as path segments: a dotted override key (`+hydra.callbacks.x._target_`, as in a
    sweep file's params) is split; a defaults entry (`model@hydra.job`) is kept whole."""
    text = str(key)
    if "@" in text or text in ("()",) or "." not in text:
        return (text,)
    return tuple(s for s in text.lstrip("+~").split(".") if s)


def walk(data: Any, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    """(key path, value) of every node of plain data (dicts, lists, scalars)."""
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from walk(v, path + _segments(k))
    elif isinstance(data, list):
        key = path[-1] if path else ""
        for i, v in enumerate(data):
            if key == "defaults" and isinstance(v, dict):  # `- model@hydra.job: x`
                yield from walk(v, path)
            else:
                yield from walk(v, path + (str(i),))


def first_problem(data: Any, where: str, prefix: Tuple[str, ...] = ()) -> None:
    """Raise CodeInConfig for the first node of `data` that would run code."""
    for path, value in walk(data, prefix):
        why = problem(path, value)
        if why:
            shown = value if isinstance(value, (str, int, float, bool)) or value is None else "..."
            shown = repr(shown) if isinstance(shown, str) and not shown.isprintable() else shown
            raise CodeInConfig(f"{where}: {'.'.join(path)}={shown}: {why}; {DATA}")


# --------------------------------------------------------------------------- YAML files


def _expanded(root) -> Tuple[int, int]:
    """(nodes once aliases are expanded, distinct nodes) of a YAML node graph, without expanding
    it; ValueError for an alias that contains itself."""
    import yaml

    sizes: Dict[int, int] = {}
    active: set = set()

    def size(node) -> int:
        k = id(node)
        if k in sizes:
            return sizes[k]
        if k in active:
            raise ValueError("an alias refers to its own anchor")
        active.add(k)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(c) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(a) + size(b) for a, b in node.value)
        active.discard(k)
        sizes[k] = n
        return n

    return size(root), len(sizes)


def load_yaml(path: Path) -> Any:
    """A user's YAML file as plain data, refusing an alias bomb before it is expanded. None for a
    file that does not parse (Hydra names its syntax error, decodelab.config.diagnose)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None:
            return None
        total, distinct = _expanded(root)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    except (ValueError, RecursionError) as e:
        why = str(e) if isinstance(e, ValueError) else "nested too deeply"
        raise CodeInConfig(f"{path}: YAML aliases: {why}; {DATA}") from None
    if total - distinct > MAX_ALIAS_NODES:
        raise CodeInConfig(
            f"{path}: YAML aliases expand the file to {total:,} nodes (more than "
            f"{MAX_ALIAS_NODES:,} added); write the values out; {DATA}"
        )
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def package(path: Path, root: Path) -> Tuple[str, ...]:
    """Where a config file's keys land, as Hydra places them: its `# @package` header, else its
    config group (the folders between `root` and the file)."""
    try:
        with path.open(encoding="utf-8") as f:
            head = [f.readline() for _ in range(20)]
    except (OSError, UnicodeDecodeError):
        head = []
    for line in head:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if text.startswith("#") and text[1:].strip().startswith("@package"):
            pkg = text[1:].strip()[len("@package") :].strip()
            pkg = pkg.removeprefix("_global_").lstrip(".")
            return tuple(s for s in pkg.split(".") if s)
    try:
        return tuple(path.relative_to(root).parent.parts)
    except ValueError:
        return ()


def check_file(path: Path, root: Optional[Path] = None) -> Any:
    """Check one YAML file of the config folder `root`; returns its data."""
    data = load_yaml(path)
    first_problem(data, str(path), package(path, root or path.parent))
    return data


def _trusted(d: Path) -> bool:
    conf = Path(CONF_DIR).resolve()
    return d == conf or conf in d.parents


def yaml_files(root: Path) -> Iterator[Path]:
    """The YAML files Hydra could load from a config directory (group folders MAX_DEPTH deep;
    hidden folders and run outputs left out)."""
    base = len(root.parts)
    for here, dirs, files in os.walk(root):
        depth = len(Path(here).parts) - base
        dirs[:] = sorted(
            d for d in dirs if depth < MAX_DEPTH and not d.startswith(".") and d not in SKIP_DIRS
        )
        for f in sorted(files):
            if f.endswith((".yaml", ".yml")):
                yield Path(here) / f


def _file_dirs(entries: Sequence[Any], base: Path) -> List[Path]:
    """The local folders of hydra.searchpath entries (pkg:// ones are installed code)."""
    out = []
    for e in entries or ():
        text = str(e)
        if "${" in text or ("://" in text and not text.startswith("file://")):
            continue
        out.append((base / text.removeprefix("file://")).resolve())
    return out


def _plain(value: Any) -> Any:
    """An override's parsed value as plain data (Hydra's quoted strings as str)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "quote") and hasattr(value, "text"):
        return str(value.text)
    return value


def _values(override) -> List[Any]:
    """The value(s) an override sets: each choice of a sweep; none for a deletion or a range."""
    if override.is_delete():
        return []
    if override.is_sweep_override():
        return [_plain(v) for v in override.value().list] if override.is_choice_sweep() else []
    return [_plain(override.value())]


def _parsed(overrides: Sequence[str]) -> Iterator[Tuple[str, Any]]:
    """(override, Hydra's parse) of each override that parses (the others: Hydra's message)."""
    from hydra.errors import HydraException

    for o in overrides:
        try:
            yield o, parse(o)
        except HydraException:
            continue


def check_overrides(overrides: Sequence[str], where: str = "the command line") -> None:
    """Every override is data: Raises CodeInConfig naming the key."""
    for text, o in _parsed(overrides):
        if into_hydra(o.key_or_group, o.package):
            raise CodeInConfig(f"{where}: {text}: puts a config group into Hydra's own config; {DATA}")
        path = tuple(s for s in o.key_or_group.replace("/", ".").split(".") if s)
        for value in _values(o):
            first_problem(value, where, path)


def user_dirs(config_dir: Optional[str], overrides: Sequence[str], config_name: str = "config") -> List[Path]:
    """A run's config folders that are not decodelab's conf/: --config-dir (or a sweep file's
    folder) and the local hydra.searchpath entries, from the command line, else from the primary
    config there (Hydra reads the search path from those two only)."""
    listed: Optional[Sequence[Any]] = None
    for _, o in _parsed(overrides):
        if o.key_or_group == "hydra.searchpath" and not o.is_delete():
            value = _plain(o.value())
            listed = value if isinstance(value, list) else [value]
    dirs = [Path(config_dir).resolve()] if config_dir else []
    if listed is None and dirs:
        primary = dirs[0] / f"{config_name}.yaml"
        data = check_file(primary) if primary.is_file() else None
        hydra = data.get("hydra") if isinstance(data, dict) else None
        listed = hydra.get("searchpath") if isinstance(hydra, dict) else None
        listed = listed if isinstance(listed, list) else None
    dirs += _file_dirs(listed or (), Path.cwd())
    return [d for d in dict.fromkeys(dirs) if d.is_dir() and not _trusted(d)]


def _named(dirs: Sequence[Path], overrides: Sequence[str]) -> Iterator[Tuple[Path, Path]]:
    """The files of the group options the overrides name (`model=mine`), wherever they are."""
    for _, o in _parsed(overrides):
        for value in _values(o):
            if isinstance(value, str) and value:
                for d in dirs:
                    for ext in (".yaml", ".yml"):
                        p = d / o.key_or_group / f"{value}{ext}"
                        if p.is_file():
                            yield p, d


def check_sources(
    config_dir: Optional[str] = None, overrides: Sequence[str] = (), config_name: str = "config"
) -> None:
    """The command line and every YAML file of the user's config folders are data (CodeInConfig
    naming the file or override and the key, else nothing). Reads the files with PyYAML's safe
    loader before Hydra loads any of them; decodelab's conf/ is not scanned (it is the code's)."""
    check_overrides(overrides)
    dirs = user_dirs(config_dir, overrides, config_name)
    seen: set = set()
    for path, root in _named(dirs, overrides):
        if path not in seen:
            seen.add(path)
            check_file(path, root)
    for d in dirs:
        for path in yaml_files(d):
            if path in seen:
                continue
            if len(seen) >= MAX_FILES:
                return  # a folder of thousands of YAML files: the composed config is still checked
            seen.add(path)
            check_file(path, d)


def check_config(cfg: Any, where: str = "the composed config") -> None:
    """A composed config (with or without its `hydra` node) is data: CodeInConfig naming the key.
    `hydra.job.env_set` entries Hydra copied from the environment (`env_copy`) are not new."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg
    hydra = data.get("hydra") if isinstance(data, dict) else None
    if isinstance(hydra, dict):
        for k in ("overrides", "runtime", "help", "hydra_help"):  # Hydra's own records and text
            hydra.pop(k, None)
        job = hydra.get("job") if isinstance(hydra.get("job"), dict) else {}
        env = job.get("env_set")
        if isinstance(env, dict):
            for name in job.get("env_copy") or ():
                env.pop(name, None)
    first_problem(data, where)
