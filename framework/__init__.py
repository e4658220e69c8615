"""decodelab framework: Hydra entry point, config -> arrays, Numba kernel, metrics, tracking."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

# Numba's on-disk cache (`cache=True`) checks an entry only against the file that defines the
# function, but serving_kernel.py inlines kernel.step_core: after an edit of kernel.py the
# serving kernel would load a stale compiled step. The cache therefore lives in a directory
# named by a hash of every jitted source, so any edit starts a fresh one. A NUMBA_CACHE_DIR the
# user set wins; an unwritable cache directory leaves Numba's default (__pycache__).
_JITTED = ("kernel.py", "serving_kernel.py", "fidelity/attention_kernel.py")


def _numba_cache_dir() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for name in _JITTED:
        digest.update((here / name).read_bytes())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = root / "decodelab" / "numba" / digest.hexdigest()[:16]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    if "numba" in sys.modules:             # imported before us: its config was read already
        sys.modules["numba"].config.CACHE_DIR = str(path)


_numba_cache_dir()
