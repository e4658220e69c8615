"""How a measured row's names map to decodelab's config files (decodelab validate;
docs/validation.md "The CSV"): a checkpoint name to
conf/model, an engine and version to conf/engine, a system to conf/hardware."""

from __future__ import annotations

import functools
import re
from typing import List, Tuple

from decodelab.paths import CONF_DIR
from decodelab.runs.validation_predict import _norm, engine_family, version_of


# Tokens of a checkpoint name that do not change the architecture: release tags, tuning and
# quantization suffixes, context tags (Qwen/Qwen3-32B-FP8, nvidia/Llama-3.1-70B-Instruct-FP8,
# mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B-Instruct-2507, meta-llama/Meta-Llama-3.1-8B,
# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, nvidia/Nemotron-H-56B-Base-8K).
_VARIANT = re.compile(
    r"^(instruct|chat|hf|it|base|thinking|exp|\d{4}|\d+k|v\d+(\.\d+)*|fp8|fp8dynamic|fp8static|fp8blockscale|"
    r"fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|w4a8|pertensor|static|dynamic|bf16|fp16)$"
)


def _candidates(model: str) -> List[str]:
    """Normalised keys of a model id, the full name first, then with variant tokens dropped."""
    name = model.lower().split("/")[-1]
    if name.startswith("meta-llama-"):
        name = name[len("meta-") :]
    if name.startswith("nvidia-"):  # nvidia/NVIDIA-Nemotron-...: the vendor repeated in the name
        name = name[len("nvidia-") :]
    parts = re.split(r"[-_]", name)
    keys = [_norm(name)]
    while len(parts) > 1 and _VARIANT.match(parts[-1]):
        parts = parts[:-1]
        keys.append(_norm("-".join(parts)))
    core = [p for p in parts if not _VARIANT.match(p)]
    keys.append(_norm("-".join(core)))
    return list(dict.fromkeys(keys))


@functools.lru_cache(maxsize=None)
def conf_yaml(group: str, name: str) -> dict:
    """conf/<group>/<name>.yaml as parsed, once a process (the rows of a CSV read the same files)."""
    import yaml

    return yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text()) or {}


def _model_yaml(name: str) -> dict:
    return conf_yaml("model", name)


@functools.lru_cache(maxsize=4)
def _model_names(mtime_ns: int) -> dict:
    """{normalised name: file stem} of conf/model's files, read again when the directory changes."""
    return {_norm(p.stem): p.stem for p in (CONF_DIR / "model").glob("*.yaml")}


def model_config_name(model: str) -> str:
    """conf/model/<name>.yaml whose name matches a model id (meta-llama/Llama-3.1-8B-Instruct ->
    llama3_1_8b; Qwen/Qwen3-32B-FP8 -> qwen3_32b; mistralai/Mixtral-8x7B-v0.1 -> mixtral_8x7b)."""
    names = _model_names((CONF_DIR / "model").stat().st_mtime_ns)
    for key in _candidates(model):
        if key in names:
            return names[key]
    raise ValueError(
        f"model {model!r} has no config in conf/model/ (known: {', '.join(sorted(names.values()))})"
    )


def engine_table() -> List[Tuple[str, str, List[str]]]:
    """(config name, family, versions) of every conf/engine file that names a family."""
    import yaml

    out = []
    for p in sorted((CONF_DIR / "engine").glob("*.yaml")):
        d = yaml.safe_load(p.read_text()) or {}
        if d.get("family"):
            out.append((p.stem, _norm(str(d["family"])), [str(v) for v in d.get("versions") or []]))
    return out


def _nearest_earlier(fam, version: str):
    """(listed version, file) of `fam` (engine_table() rows of one family) with the latest listed
    version not after `version` (PEP 440 order), or None (no version, unparsable, older than all)."""
    v = version_of(version) if version else None
    if v is None:
        return None
    earlier = [(w, name) for name, _, vs in fam for w in map(version_of, vs) if w is not None and w <= v]
    return max(earlier) if earlier else None


def engine_config_name(engine: str, version: str = "", table=None) -> str:
    """The conf/engine file for a measured engine and version: the file of that family listing the
    version; else the file listing the nearest earlier version (an engine keeps its defaults until a
    release changes them: vLLM 0.14.1 runs with the file of 0.14.0); else (no version, one that does
    not parse, or one older than every file's) the family's first file (alphabetically) listing
    none, else its first. `table`: engine_table(), read once by the caller."""
    table = engine_table() if table is None else table
    fam = [t for t in table if t[1] == engine_family(engine)]
    if not fam:
        known = sorted({f"{f} ({n})" for n, f, _ in table})
        raise ValueError(f"engine {engine!r} has no config in conf/engine/ (known: {', '.join(known)})")
    for name, _, versions in fam:
        if version and version in versions:
            return name
    near = _nearest_earlier(fam, version)
    if near is not None:
        return near[1]
    return next((name for name, _, vs in fam if not vs), fam[0][0])


def mapping_note(table, engine: str, version: str) -> str:
    """How a row's engine file was chosen ('' when a file of its family lists its version): the
    nearest earlier listed version's, or the family's default file. `table`: engine_table()."""
    fam = [t for t in table if t[1] == engine_family(str(engine))]
    if any(version in vs for _, _, vs in fam):
        return ""
    near = _nearest_earlier(fam, version)
    if near is not None:
        return f"no file lists it: that of the nearest earlier listed version, {near[0]}"
    if not version:
        return "no version given: the family's default file"
    return "no file lists it or an earlier version: the family's default file"


def engine_maps(df) -> List[str]:
    """Per row of a validation table: its engine file and, where no file lists its version, how
    that file was chosen (mapping_note); '' for a row not run."""
    table, memo, out = engine_table(), {}, []
    for eng, ver, cfg in zip(df["engine"], df["engine_version"], df["engine_config"]):
        if (eng, ver, cfg) not in memo:
            note = mapping_note(table, eng, ver) if cfg else ""
            memo[(eng, ver, cfg)] = f"{cfg} ({note})" if note else cfg
        out.append(memo[(eng, ver, cfg)])
    return out


def version_notes(df) -> List[str]:
    """One line per (engine, version) of the table that no engine file lists: the file it ran with."""
    table = engine_table()
    out = []
    for (eng, ver, cfg), _ in df.groupby(["engine", "engine_version", "engine_config"], sort=True):
        if not cfg:
            continue  # rows the model cannot express (read_rows): not run
        why = mapping_note(table, eng, ver)
        if why:
            out.append(f"{eng} {ver}".strip() + f" ran with conf/engine/{cfg}.yaml ({why})")
    return out


def hardware_config_name(system: str) -> str:
    """conf/hardware/<name>.yaml of a row's `system` (AIConfigurator's system names h100_sxm,
    h200_sxm, b200_sxm, a100_sxm are decodelab's; H200, h200-sxm, NVIDIA H200 map too)."""
    names = {_norm(p.stem): p.stem for p in (CONF_DIR / "hardware").glob("*.yaml")}
    key = _norm(system.replace("NVIDIA", "").replace("nvidia", ""))
    for k in (key, key + "sxm"):
        if k in names:
            return names[k]
    raise ValueError(
        f"system {system!r} has no config in conf/hardware/ (known: {', '.join(sorted(names.values()))})"
    )
