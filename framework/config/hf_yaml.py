"""The model YAML of an imported Hugging Face config (`decodelab import-model`): its parameter
counts and the YAML text, each field with the config.json key it came from in its comment
(config.hf_model reads the config.json)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Optional

from decodelab.components.models import ARCHITECTURES
from decodelab.config.hf_linear import FIELDS as LINEAR
from decodelab.config.hf_model import BASE, MLA, MOE
from decodelab.config.hf_reader import Imported
from decodelab.opcost.sampler import GEN_KEYS
from decodelab.core.schema_model import ModelConfig
from decodelab.errors import ConfigError


def parameters(imp: Imported) -> Dict[str, float]:
    """Parameter counts of the imported shape (components/models param_counts)."""
    m = {f.name: f.default for f in fields(ModelConfig) if isinstance(f.default, (int, float, str, bool))}
    m.update(imp.values)
    m.setdefault("layer_pattern", [])
    arch = ARCHITECTURES[imp.values["arch"]]
    return arch.param_counts(SimpleNamespace(**m))


def read_generation_config(imp: Imported, path: Path) -> None:
    """The sampling defaults of a generation_config.json (`path`, beside the config.json) into
    `generation_defaults`: the keys vLLM's `get_diff_sampling_param` reads (opcost/sampler.py), as
    written (vLLM reads them whatever `do_sample` says); nothing when the file is absent."""
    if not path.is_file():
        return
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a JSON file ({type(e).__name__})") from None
    num = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
    gen = {k: d[k] for k in GEN_KEYS if isinstance(d, dict) and num(d.get(k))}
    if gen:
        imp.set("generation_defaults", gen, f"{path.name}: {', '.join(gen)} (the engine's sampling defaults)")


def to_yaml(imp: Imported, params: Optional[Dict[str, float]] = None) -> str:
    """The model YAML: one field a line, its source in the comment (conf/model/*.yaml style)."""
    v = imp.values
    keys = list(BASE[1:])
    if v.get("n_experts"):
        keys += MOE
    if "kv_lora_rank" in v:
        keys += MLA
    extra = (
        "qk_norm_scope",
        "index_topk",
        "index_n_heads",
        "index_head_dim",
        "index_layers",
        "dense_attention_layers",
        "n_mtp_modules",
        "layer_pattern",
        "sliding_window",
        "fp8_checkpoint",
        "expert_only_dtypes",
        "expert_only_dense_dtype",
        "global_head_dim",
        "global_kv_heads",
        "global_k_eq_v",
        "v_head_dim",
        "q_lora_rank",
        "qk_rope_head_dim",
        "compress_ratios",
        "o_groups",
        "o_lora_rank",
        "hc_mult",
        "ffn_free_layers",
        "moe_latent_dim",
        "linear_kind",
        "attn_res_block_size",
    )
    keys += [k for k in extra + LINEAR if k in v and k not in keys]
    keys += ["generation_defaults"] if "generation_defaults" in v else []
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
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {w}" for k, w in x.items()) + "}"
    return str(x)
