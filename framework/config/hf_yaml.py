"""The model YAML of an imported Hugging Face config (`decodelab import-model`): its parameter
counts and the YAML text, each field with the config.json key it came from in its comment
(config.hf_model reads the config.json)."""

from __future__ import annotations

import json
from dataclasses import fields
from types import SimpleNamespace
from typing import Dict, Optional

from decodelab.components.models import ARCHITECTURES
from decodelab.config.hf_model import BASE, MLA, MOE, Imported
from decodelab.core.schema import ModelConfig


def parameters(imp: Imported) -> Dict[str, float]:
    """Parameter counts of the imported shape (components/models param_counts)."""
    m = {f.name: f.default for f in fields(ModelConfig) if isinstance(f.default, (int, float, str, bool))}
    m.update(imp.values)
    m.setdefault("layer_pattern", [])
    arch = ARCHITECTURES[imp.values["arch"]]
    return arch.param_counts(SimpleNamespace(**m))


def to_yaml(imp: Imported, params: Optional[Dict[str, float]] = None) -> str:
    """The model YAML: one field a line, its source in the comment (conf/model/*.yaml style)."""
    v = imp.values
    keys = list(BASE[1:])
    if v.get("n_experts"):
        keys += MOE
    if "kv_lora_rank" in v:
        keys += MLA
    keys += [k for k in ("n_mtp_modules", "layer_pattern", "sliding_window", "fp8_checkpoint") if k in v]
    lines = [
        f"# {imp.name} ({imp.model_type}, arch {v['arch']}): written by `decodelab import-model` from",
        f"# {imp.path}. Review it: 'assumed' in a comment marks a field config.json does not state.",
    ]
    lines += [f"# note: {n}" for n in imp.notes]
    lines += [f"# not expressible: {u}" for u in imp.unexpressed]
    lines.append(f"name: {imp.name}")
    for k in keys:
        lines.append(f"{k + ': ' + _value(v[k]):<23} # {imp.why[k]}")
    p = f"; {params['total'] / 1e9:.2f}B params computed from these shapes" if params else ""
    lines.append(f"source: {json.dumps(f'HF config.json ({imp.model_type}) imported from {imp.path}{p}')}")
    return "\n".join(lines) + "\n"


def _value(x) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, list):
        return "[" + ", ".join(map(str, x)) + "]"
    return str(x)
