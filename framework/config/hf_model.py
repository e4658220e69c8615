"""A Hugging Face `config.json` -> a model YAML in the schema of decodelab.core.schema.ModelConfig
(`decodelab import-model`, docs/extending.md, "Add a model"). Pure Python: json in, YAML text out.

Mapped: dense / GQA / MHA (llama, mistral, qwen2, qwen3: `head_dim` when given, else hidden_size /
num_attention_heads); mixture of experts (mixtral and gpt-oss `num_local_experts`, qwen2_moe /
qwen3_moe `num_experts` + `moe_intermediate_size` + shared expert, deepseek `n_routed_experts`,
`n_shared_experts`, `first_k_dense_replace`); multi-head latent attention (`kv_lora_rank`,
`q_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`, `num_nextn_predict_layers`) with
DeepSeek sparse attention's indexer (`index_topk`, `index_n_heads`, `index_head_dim`: hf_dsa.py);
sliding-window layers (`layer_types`, `use_sliding_window` + `max_window_layers`,
`sliding_window_pattern`, or a bare `sliding_window`) -> `layer_pattern` (the shortest period that
repeats to the layer list, components/models/layers.py) + `sliding_window`, arch=hybrid;
`tie_word_embeddings`, `attention_bias`, `hidden_act`, `max_position_embeddings`. A multimodal
config's language model is read from `text_config`. Families with modules of their own: Gated DeltaNet
hybrids (hf_linear.py), Mamba-2 hybrids (Nemotron-H, hf_mamba.py), searched Llama-Nemotron layers
(hf_nas.py), Llama 4's experts and chunked attention (hf_llama4.py), Kimi Linear (hf_kimi_linear.py) and
others (hf_*.py); the MoE keys are hf_moe.py's, the layer kinds hf_layers.py's (dense layers anywhere are a
count), the reading primitives hf_reader.py's.

A key config.json omits takes the default of the family's transformers configuration class
(config/hf_families.py): Gemma ties its embeddings, Gemma-2 alternates sliding and full layers,
Gemma-3 slides five layers in six; soft-capping is noted (it moves no bytes).

Every key read is named in the comment of the field it sets; keys not read are reported, and what
the schema cannot express is named with its reason. What it cannot represent is refused with one
line (ConfigError): a missing required key, a file that is not a JSON object, more KV heads than
heads or KV heads that do not divide them, more experts per token than experts, a state-space /
linear-attention model other than the hybrids it reads, an unknown model_type with keys it cannot map."""

from __future__ import annotations

import json
import re
from pathlib import Path

from decodelab.config import (
    hf_deepseek_v4,
    hf_dsa,
    hf_gemma4,
    hf_kimi_linear,
    hf_layers,
    hf_linear,
    hf_llama4,
    hf_mamba,
    hf_mimo_v2,
    hf_minimax_m3,
    hf_moe,
    hf_nas,
)
from decodelab.config import hf_families as fam
from decodelab.config.hf_families import GEGLU_TYPES, QK_NORM_TYPES, QKV_BIAS_TYPES
from decodelab.config.hf_reader import Imported, Keys, positive_int
from decodelab.core.schema_model import ModelConfig
from decodelab.errors import ConfigError

REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
# gate + up + down projections (situ: Kimi's SituAndMul)
GATED_ACTS = ("silu", "swish", "swiglu", "swigluoai", "situ")
GELU_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu")
# keys whose mechanism the schema has no field for (when set to a value that changes the model)
GAPS = {
    "o_lora_rank": "low-rank output projection (DeepSeek-V4)",
    "attention_chunk_size": "chunked local attention (Llama 4)",
    "no_rope_layers": "layers without RoPE (no cost difference, but a per-layer pattern)",
    "num_kv_shared_layers": "layers that share another layer's KV cache",
    "hc_mult": "hyper-connections (several residual streams)",
    "compress_ratios": "compressed-KV attention layers",
    "mlp_bias": "MLP biases (not counted: < 0.01% of the weights)",
}
# ModelConfig fields written for every model; the MoE, MLA and sliding ones only when used
BASE = tuple(
    "name arch n_layers d_model n_heads n_kv_heads head_dim ffn_dim vocab_size ffn_act tied_embeddings "
    "qkv_bias qk_norm max_context".split()
)
MOE = ("n_experts", "experts_per_token", "n_shared_experts", "expert_ffn_dim", "first_dense_layers")
MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def load_json(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file (give the path of a Hugging Face config.json)")
    try:
        d = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not JSON ({e}); give a Hugging Face config.json") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path} holds a JSON {type(d).__name__}, not the object of a config.json")
    return d


def default_name(path: str, d: dict) -> str:
    """From the checkpoint directory holding config.json (or the file's stem), as a file name."""
    p = Path(path).resolve()
    base = p.parent.name if p.name == "config.json" else p.stem
    base = base or str(d.get("model_type", "model"))
    return re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_") or "model"


def from_config(d: dict, name: str, path: str = "config.json") -> Imported:
    """Map a parsed config.json onto ModelConfig fields; ConfigError for what it cannot represent."""
    outer = None
    if not any(k in d for k in REQUIRED) and isinstance(d.get("text_config"), dict):
        outer, d = d, d["text_config"]  # multimodal: the language model's shapes
    mt = str(d.get("model_type") or (outer or {}).get("model_type") or "unknown")
    if not (hf_linear.is_gated_deltanet(d) or hf_mamba.is_nemotron_h(d) or hf_kimi_linear.is_kimi_linear(d)):
        fam.refuse_state_space(mt, d, path)
    d = hf_nas.with_uniform_keys(hf_mamba.with_block_count(d), path)
    r = Keys(d, fam.defaults(mt))
    missing = [k for k in REQUIRED if not r.has(k)]
    if not r.has("intermediate_size") and not r.has("moe_intermediate_size"):
        missing.append("intermediate_size")
    if missing:
        raise ConfigError(f"{path} has no {', '.join(missing)} (required to write a model YAML)")
    r.used.add("model_type")
    imp = Imported(name=name, path=path, model_type=mt)
    if outer is not None:
        imp.notes.append("the language model is read from text_config (the vision tower is not modelled)")
    _shape(r, imp)
    hf_moe.read(r, imp)
    _mla(r, imp)
    hf_deepseek_v4.read(r, imp)
    hf_dsa.read(r, imp)
    hf_layers.read(r, imp)
    _misc(r, imp, outer)
    hf_linear.read(r, imp)
    if hf_mamba.is_nemotron_h(d):
        hf_mamba.read(r, imp)
    if hf_nas.is_nas(d):
        hf_nas.read(r, imp)
    hf_llama4.read(r, imp)
    hf_gemma4.read(r, imp)
    hf_mimo_v2.read(r, imp)
    hf_minimax_m3.read(r, imp)
    hf_kimi_linear.read(r, imp)
    imp.unused = sorted(set(d) - r.used) + sorted(f"(outer) {k}" for k in (outer or {}) if k != "text_config")
    unknown = fam.check_unknown(mt, imp.unused, path)
    imp.notes += [unknown] if unknown else []
    _mark_defaults(r, imp)
    arch = "mla" if "kv_lora_rank" in imp.values else ("csa" if "compress_ratios" in imp.values else None)
    if imp.values.get("layer_pattern"):
        arch = arch or "hybrid"
    arch = arch or ("moe" if imp.values.get("n_experts") else "dense")
    imp.set("arch", arch, "decodelab architecture of these fields (components/models/)")
    return imp


def _mark_defaults(r: Keys, imp: Imported) -> None:
    """A field set from a family default says so in its comment, and the notes list the defaults."""
    for k in sorted(r.defaulted):
        src = f"{k} {r.defaults[k]} (not in config.json: the {imp.model_type} default in transformers)"
        for f, why in imp.why.items():
            imp.why[f] = re.sub(rf"config\.json {re.escape(k)}\b", src, why)
    if r.defaulted:
        shown = ", ".join(f"{k}={r.defaults[k]}" for k in sorted(r.defaulted))
        imp.notes.append(f"not in config.json, taken from transformers' {imp.model_type} defaults: {shown}")


def _shape(r: Keys, imp: Imported) -> None:
    n_layers, d = positive_int(r, "num_hidden_layers"), positive_int(r, "hidden_size")
    h, vocab = positive_int(r, "num_attention_heads"), positive_int(r, "vocab_size")
    imp.set("n_layers", n_layers, "config.json num_hidden_layers")
    imp.set("d_model", d, "config.json hidden_size")
    imp.set("n_heads", h, "config.json num_attention_heads")
    if r.has("num_key_value_heads"):
        kv = positive_int(r, "num_key_value_heads")
        if kv > h or h % kv:
            divisors = ", ".join(str(x) for x in range(1, h + 1) if h % x == 0)
            raise ConfigError(
                f"config.json num_key_value_heads={kv} must divide num_attention_heads={h} "
                f"(allowed: {divisors})"
            )
        imp.set("n_kv_heads", kv, f"config.json num_key_value_heads ({h // kv} query heads per KV head)")
    else:
        imp.set("n_kv_heads", h, "config.json has no num_key_value_heads: MHA (= num_attention_heads)")
    if r.has("head_dim"):
        hd = positive_int(r, "head_dim")
        differs = f", not hidden_size / num_attention_heads = {d / h:g}" if hd * h != d else ""
        imp.set("head_dim", hd, f"config.json head_dim{differs}")
    else:
        imp.set("head_dim", d // h, f"config.json hidden_size / num_attention_heads = {d} / {h}")
        if d % h and not r.has("kv_lora_rank"):  # MLA: head_dim from its own dims (_mla)
            imp.unexpressed.append(f"hidden_size={d} is not a multiple of num_attention_heads={h}")
    dense = r.get("intermediate_size") or r.get("moe_intermediate_size")
    imp.set("ffn_dim", dense, "config.json intermediate_size")
    imp.set("vocab_size", vocab, "config.json vocab_size")


def _mla(r: Keys, imp: Imported) -> None:
    if not r.has("kv_lora_rank"):
        return
    need = [k for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if not r.has(k)]
    if need:
        raise ConfigError(f"{imp.path} has kv_lora_rank but no {', '.join(need)} (required for MLA)")
    nope, rope = positive_int(r, "qk_nope_head_dim"), positive_int(r, "qk_rope_head_dim")
    kv_heads = imp.values["n_kv_heads"]
    imp.set(
        "n_kv_heads",
        1,
        f"MLA: one latent per layer shared by all heads (config.json lists {kv_heads} KV heads)",
    )
    imp.set("head_dim", nope + rope, f"qk_nope_head_dim + qk_rope_head_dim = {nope} + {rope}")
    q = r.get("q_lora_rank", 0)
    imp.set("q_lora_rank", int(q), "config.json q_lora_rank" + ("" if q else " (null: no query compression)"))
    imp.set("kv_lora_rank", positive_int(r, "kv_lora_rank"), "config.json kv_lora_rank")
    imp.set("qk_nope_head_dim", nope, "config.json qk_nope_head_dim")
    imp.set("qk_rope_head_dim", rope, "config.json qk_rope_head_dim")
    imp.set("v_head_dim", positive_int(r, "v_head_dim"), "config.json v_head_dim")


def _misc(r: Keys, imp: Imported, outer: dict = None) -> None:
    mt = imp.model_type
    _, act = r.first("hidden_act", "hidden_activation", "activation_function")
    act = str(act or "silu")
    if act in GATED_ACTS or (act in GELU_ACTS and mt in GEGLU_TYPES):
        imp.set("ffn_act", "swiglu", f"config.json hidden_act {act}: gated MLP (gate + up + down)")
    elif act in GELU_ACTS:
        imp.set("ffn_act", "gelu", f"config.json hidden_act {act}: up + down projections")
    else:
        imp.set("ffn_act", "swiglu", f"config.json hidden_act {act}: assumed gated (gate + up + down)")
        imp.unexpressed.append(
            f"hidden_act={act}: not a known activation; set ffn_act: gelu if the MLP is ungated"
        )
    if "tie_word_embeddings" in r.d:
        tied = bool(r.get("tie_word_embeddings"))
        imp.set("tied_embeddings", tied, f"config.json tie_word_embeddings {str(tied).lower()}")
    else:
        imp.set("tied_embeddings", *fam.tie(mt, outer, imp.path))
    if "attention_bias" in r.d:
        b = bool(r.get("attention_bias"))
        imp.set("qkv_bias", b, f"config.json attention_bias {str(b).lower()}")
    elif mt in QKV_BIAS_TYPES:
        imp.set("qkv_bias", True, f"{mt}: q/k/v projections have bias=True (not in config.json)")
    else:
        imp.set("qkv_bias", False, "config.json has no attention_bias: assumed false")
    if "use_qk_norm" in r.d:  # stated by the config (MiniMax-M2)
        qk = bool(r.get("use_qk_norm"))
        imp.set("qk_norm", qk, f"config.json use_qk_norm {str(qk).lower()}")
        if qk and r.get("qk_norm_type") == "per_layer":
            imp.set("qk_norm_scope", "layer", "config.json qk_norm_type per_layer")
    else:
        qk = mt in QK_NORM_TYPES
        imp.set(
            "qk_norm", qk, f"{mt}: per-head q/k RMSNorm in the code" if qk else f"{mt}: no q/k norm assumed"
        )
    if r.has("max_position_embeddings"):
        imp.set(
            "max_context", positive_int(r, "max_position_embeddings"), "config.json max_position_embeddings"
        )
    else:
        imp.set("max_context", ModelConfig.max_context, "config.json has no max_position_embeddings: default")
    if r.get("num_nextn_predict_layers", 0):
        imp.set(
            "n_mtp_modules", int(r.get("num_nextn_predict_layers")), "config.json num_nextn_predict_layers"
        )
    imp.notes += fam.softcap_notes(r.get, r.has)
    for k, what in GAPS.items():
        handled = hf_llama4.is_llama4(imp.model_type) and k in ("attention_chunk_size", "no_rope_layers")
        handled = handled or (
            hf_deepseek_v4.is_v4(r.d) and k in ("o_lora_rank", "hc_mult", "compress_ratios")
        )
        handled = handled or (hf_mimo_v2.is_mimo_v2(r.d) and k == "attention_chunk_size")
        if not handled and r.has(k) and r.get(k) not in (0, False, [], 1 if k == "hc_mult" else None):
            imp.unexpressed.append(f"{k}={r.d[k]!r}: {what}")
    fam.dtype(r, imp)
