"""Where decodelab's shipped files are: the Hydra configs, the claim and study sweeps and the
measured validation data. In a source checkout `conf/` and `sweeps/` sit beside `framework/`
(the source of the `decodelab` package); an installed wheel carries them inside the package
(`decodelab/conf`, `decodelab/sweeps`). Imports nothing of decodelab."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent  # the checkout root (site-packages for a wheel)


def _shipped(name: str) -> Path:
    inside = PACKAGE_DIR / name  # installed wheel
    return inside if inside.is_dir() else SOURCE_ROOT / name


CONF_DIR = _shipped("conf")
SWEEPS_DIR = _shipped("sweeps")
DATA_DIR = PACKAGE_DIR / "data"  # shipped data (validation CSVs and their provenance)
VALIDATION_DIR = DATA_DIR / "validation"


def cache_root() -> Path:
    """decodelab's per-user cache (derived files, safe to delete): $DECODELAB_CACHE, else
    $XDG_CACHE_HOME/decodelab, else ~/.cache/decodelab. Not created here."""
    base = os.environ.get("DECODELAB_CACHE")
    return (
        Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "decodelab"
    )


def resolve_user_path(path: str) -> Path:
    """A user-given file path: as given (absolute or relative to the working directory), else
    relative to the source checkout (examples/...), else inside the shipped data."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    for base in (SOURCE_ROOT, DATA_DIR):
        if (base / p).exists():
            return base / p
    return p
