"""Which release's kernel table an engine release reads (hardware.op_tables.by_version; docs/model.md,
"Per-shape operator laws").

Kernels change between an engine's releases: the B200 block-scaled FP8 GEMM of TensorRT-LLM takes 25.3 us
at one token in 1.2.0rc5 and 10.8 us in 1.3.0rc20 (n 2,048, k 7,168); vLLM 0.18.0's H200 MoE blocks run a
median 2-32% faster than 0.14.0's, by dtype and width (docs/journal/2026-11-30-release-tables.md). A chip file may therefore list an engine's tables per release;
a design whose `engine.version` names its release reads, for each kind of table, the listed release
nearest it (`nearest`): its own if listed, else the neighbour (the listed release just before or just
after it) whose release numbers (major, minor, micro) differ least, compared in that order, then the
pre-release number; on a tie the earlier one (a release runs no kernel written after it)."""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

from decodelab.errors import ConfigError

NOT_A_RELEASE = "is not a release version (PEP 440, e.g. 0.18.0 or 1.2.0rc6)"


def parse(text: str):
    """A release (packaging.version.Version) of `text`, or None where it is not one (PEP 440)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(text).strip())
    except InvalidVersion:
        return None


def release(text: str, where: str = "engine.version"):
    """The release `text` names ("" -> None); one ConfigError line naming `where` if it is not one."""
    if not str(text or "").strip():
        return None
    v = parse(text)
    if v is None:
        raise ConfigError(f"{where}={text!r} {NOT_A_RELEASE}")
    return v


def _gap(a, b) -> Tuple[int, ...]:
    """How far apart two releases are: |differences| of (major, minor, micro), then of the pre-release number."""
    ra = (tuple(a.release) + (0, 0, 0))[:3]
    rb = (tuple(b.release) + (0, 0, 0))[:3]
    pa = a.pre[1] if a.pre else 0
    pb = b.pre[1] if b.pre else 0
    return tuple(abs(x - y) for x, y in zip(ra, rb)) + (abs(pa - pb),)


def nearest(version: str, listed: Iterable[str]) -> Optional[str]:
    """The entry of `listed` (release strings) that a design of release `version` reads (module
    docstring), or None where nothing is listed."""
    v = release(version)
    keyed = sorted((parse(x), x) for x in listed if parse(x) is not None)
    if v is None or not keyed:
        return None
    for k, text in keyed:
        if k == v:
            return text
    before = [kt for kt in keyed if kt[0] < v]
    after = [kt for kt in keyed if kt[0] > v]
    return min(before[-1:] + after[:1], key=lambda kt: (_gap(kt[0], v), kt[0] > v))[1]
