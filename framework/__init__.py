"""decodelab: how fast does model M decode on hardware H, with KV-cache policy P and optimizations O,
and why. The source of this package is the folder framework/ (components/ is decodelab.components).

Python API (docs/api.md, README "Python API"; its layer: docs/architecture.md):

    r = decodelab.evaluate("model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=8")
    r.status, r.metrics["tpot_ms"]
    df = decodelab.sweep("workload.batch_size=1,2,4,8", "hardware=h100_sxm,sn40l_rack16")
    t = decodelab.grid("hardware.memory.hbm.bandwidth_gb_s=1000,2000", "workload.batch_size=1,8")
    df = decodelab.load_results("outputs/multirun/2026-11-24/10-00-00-000000")

The API functions are imported on first use (PEP 562), so `import decodelab` stays light."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

# Numba's on-disk cache (`cache=True`) checks an entry only against the file that defines the
# function, but modes/serving/scheduler.py inlines core/kernel.step_core and its helper modules (and core/grid_kernel.py
# its step_time): after an edit of kernel.py they would load a stale compiled step. The cache
# therefore lives in a directory named by a hash of every jitted source, so any edit starts a
# fresh one, under decodelab's cache root (paths.cache_root). A NUMBA_CACHE_DIR the user set wins;
# an unwritable cache directory leaves Numba's default (__pycache__).
_JITTED = (
    "core/kernel.py",
    "core/kernel_lookup.py",
    "kernel_layout.py",
    "core/pipeline.py",
    "core/grid_kernel.py",
    "modes/serving/scheduler.py",
    "modes/serving/admission.py",
    "modes/serving/layout.py",
    "modes/serving/parts.py",
    "modes/serving/pick.py",
    "modes/serving/stepcost.py",
    "modes/serving/recv.py",
    "fidelity/attention_kernel.py",
)


def _numba_cache_dir() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for name in _JITTED:
        digest.update((here / name).read_bytes())
    from decodelab.paths import cache_root

    path = cache_root() / "numba" / digest.hexdigest()[:16]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    if "numba" in sys.modules:  # imported before us: its config was read already
        sys.modules["numba"].config.CACHE_DIR = str(path)


_numba_cache_dir()


from decodelab.version import __version__  # noqa: E402  (after the Numba cache is set)
from decodelab.errors import ConfigError, Infeasible  # noqa: E402  (light: no Hydra, no Numba)

_API = ("evaluate", "sweep", "grid", "slo", "load_results", "Result")


def __getattr__(name: str):
    # PEP 562: the API (and Hydra, MLflow behind it) loads on first use, not on `import decodelab`
    if name in _API:
        from decodelab import api

        return getattr(api, name)
    raise AttributeError(f"module 'decodelab' has no attribute {name!r}")


__all__ = ["__version__", "ConfigError", "Infeasible", *_API]
