"""The installed package version (bottom layer: imports nothing of decodelab)."""

from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("decodelab")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"
