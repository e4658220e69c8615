"""`decodelab import-model`: Hugging Face config.json -> model YAML (framework/config/hf_model.py).
The shipped example configs (tests/data/hf/, public config.json files) must reproduce the
project's hand-written model YAMLs field for field, and an imported model must evaluate."""

from __future__ import annotations

import json

import decodelab
import pytest
import yaml
from conftest import CONF, ROOT, assert_import_matches_shipped, searchpath
from conftest import decodelab as cli
from decodelab.config import hf_model, hf_yaml
from decodelab.config.compose import compose

HF = ROOT / "tests" / "data" / "hf"
# may differ: naming, provenance, a deployment's graph menu, the sampling defaults of a checkpoint's
# generation_config.json (read only where the file sits beside config.json; tests/data/hf has none),
# the ops a quantized checkpoint keeps in BF16 (its quantization config, not config.json), the MTP
# module's published acceptance (a paper's figure)
NOT_SHAPE = (
    "name", "source", "static_graphs", "generation_defaults", "quant_bf16_ops", "mtp_acceptance",
    "allreduce_norm_engines",  # how an engine's model code runs it, not in config.json
)  # fmt: skip


def write(tmp_path, folder: str, name: str):
    path = HF / folder / "config.json"
    imp = hf_model.from_config(hf_model.load_json(str(path)), name, str(path))
    out = tmp_path / "model" / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(hf_yaml.to_yaml(imp, hf_yaml.parameters(imp)))
    return imp, out


@pytest.mark.parametrize(
    "folder, shipped",
    [
        ("Llama-3.1-8B", "llama3_1_8b"),
        ("Mixtral-8x7B-v0.1", "mixtral_8x7b"),
        ("DeepSeek-R1", "deepseek_r1"),
        ("gpt-oss-120b", "gpt_oss_120b"),
    ],
)
def test_import_reproduces_the_shipped_model(tmp_path, folder, shipped):
    imp, _ = write(tmp_path, folder, "imported")
    mine = compose(["model=imported", searchpath(tmp_path), "tracking=off"]).model
    theirs = compose([f"model={shipped}", "tracking=off"]).model
    for k in theirs:
        if k not in NOT_SHAPE:
            assert mine[k] == theirs[k], f"{shipped}.{k}: imported {mine[k]!r}, shipped {theirs[k]!r}"
    # every field the shipped YAML writes is written by the import too (not left to a default)
    written = set(yaml.safe_load((CONF / "model" / f"{shipped}.yaml").read_text()))
    assert written - set(imp.values) <= set(NOT_SHAPE)


def test_qwen3_32b_head_dim_params_and_evaluation(tmp_path):
    imp, out = write(tmp_path, "Qwen3-32B", "qwen3_32b")
    v = imp.values
    # head_dim 128 is given: hidden_size / heads would be 5120 / 64 = 80
    assert v["head_dim"] == 128 and "not hidden_size / num_attention_heads = 80" in imp.why["head_dim"]
    assert (v["arch"], v["n_kv_heads"], v["max_context"], v["ffn_dim"]) == ("dense", 8, 40960, 25600)
    assert "layer_pattern" not in v  # use_sliding_window false: full attention everywhere
    # parameters by hand: embed + lm_head 2 x 151936 x 5120 = 1,555,824,640
    # layer: q 5120 x 8192 + k, v 2 x 5120 x 1024 + o 8192 x 5120 = 94,371,840; MLP 3 x 5120 x 25600
    # = 393,216,000; 2 norms 10,240 + q/k norms 2 x 128 -> 487,598,336; x 64 = 31,206,293,504;
    # + final norm 5120
    assert v["qk_norm"] is True and "q/k RMSNorm" in imp.why["qk_norm"]
    assert hf_yaml.parameters(imp)["total"] == 1_555_824_640 + 64 * 487_598_336 + 5120 == 32_762_123_264
    assert "32.76B params" in out.read_text()
    r = decodelab.evaluate("model=qwen3_32b", searchpath(tmp_path), "hardware=dgx_h100", "tracking=off")
    assert r.ok, r.reason
    assert r.metrics["tpot_ms"] > 0 and r.metrics["tok_s_per_chip"] > 0


@pytest.mark.parametrize("folder", ["Llama-3.1-8B", "Mixtral-8x7B-v0.1", "DeepSeek-R1", "gpt-oss-120b"])
def test_imported_models_evaluate(tmp_path, folder):
    write(tmp_path, folder, "m")
    # DeepSeek-R1 in FP8 holds 79.2 GiB of weights per GPU at TP8: more than an H100 leaves beside them (79.22
    # GiB as CUDA reports it), so it runs on eight H200s, as it is served (one 8 x H100 node does not hold it).
    hw = ["hardware=h200_sxm", "hardware.n_chips=8", "workload.weight_dtype=fp8"]
    r = decodelab.evaluate(
        "model=m",
        searchpath(tmp_path),
        *(hw if folder == "DeepSeek-R1" else ["hardware=dgx_h100"]),
        "tracking=off",
    )
    assert r.ok, r.reason


def test_unused_and_notes_are_reported():
    path = HF / "DeepSeek-R1" / "config.json"
    imp = hf_model.from_config(hf_model.load_json(str(path)), "ds", str(path))
    assert {"rope_theta", "scoring_func", "topk_group", "n_group", "routed_scaling_factor"} <= set(imp.unused)
    assert not {"kv_lora_rank", "n_routed_experts", "first_k_dense_replace"} & set(imp.unused)
    assert any("workload.weight_dtype=fp8" in n for n in imp.notes)
    assert imp.unexpressed == []


# ------------------------------------------------------------------------------ mappings


def base(**kw) -> dict:
    d = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    d.update(kw)
    return d


def imp_of(d: dict):
    return hf_model.from_config(d, "t")


def test_qwen2_sliding_layers_from_max_window_layers():
    # HF Qwen2: layer i slides when use_sliding_window and i >= max_window_layers
    i = imp_of(base(model_type="qwen2", use_sliding_window=True, sliding_window=1024, max_window_layers=2))
    assert i.values["layer_pattern"] == ["full", "full", "sliding", "sliding"]
    assert i.values["arch"] == "hybrid" and i.values["sliding_window"] == 1024
    assert i.values["qkv_bias"] is True  # Qwen2 q/k/v biases are in the code, not config.json
    off = imp_of(base(model_type="qwen2", use_sliding_window=False, sliding_window=1024, max_window_layers=2))
    assert "layer_pattern" not in off.values and off.values["arch"] == "dense"


def test_mistral_sliding_window_without_layer_types_slides_every_layer():
    i = imp_of(base(model_type="mistral", sliding_window=1024))
    assert i.values["layer_pattern"] == ["sliding"] and i.values["arch"] == "hybrid"
    # a window covering the whole context is full attention
    assert "layer_pattern" not in imp_of(base(sliding_window=4096)).values


def test_layer_types_period_and_unknown_kinds():
    i = imp_of(base(layer_types=["sliding_attention"] * 3 + ["full_attention"], sliding_window=512))
    assert i.values["layer_pattern"] == ["sliding", "sliding", "sliding", "full"]
    j = imp_of(
        base(num_hidden_layers=6, layer_types=["sliding_attention", "full_attention"] * 3, sliding_window=64)
    )
    assert j.values["layer_pattern"] == ["sliding", "full"]
    with pytest.raises(decodelab.errors.ConfigError, match="layer_types has linear_attention"):
        imp_of(base(layer_types=["linear_attention", "full_attention"] * 2))


def test_qk_norm_from_use_qk_norm_else_the_model_type():
    # MiniMax-M2 states it (use_qk_norm); Qwen3's is in its code; Llama has none
    m2 = base(model_type="minimax_m2", use_qk_norm=True, tie_word_embeddings=False)
    assert imp_of(m2).values["qk_norm"] is True
    assert imp_of(base(model_type="qwen3")).values["qk_norm"] is True
    assert imp_of(base(model_type="qwen3", use_qk_norm=False)).values["qk_norm"] is False
    assert imp_of(base(model_type="llama")).values["qk_norm"] is False


def test_qwen_moe_experts_and_shared_expert():
    i = imp_of(
        base(
            model_type="qwen2_moe",
            num_experts=60,
            num_experts_per_tok=4,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=512,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    )
    v = i.values
    assert (v["arch"], v["n_experts"], v["experts_per_token"], v["expert_ffn_dim"]) == ("moe", 60, 4, 128)
    assert v["n_shared_experts"] == 4  # one shared expert of width 512 = 4 experts of width 128
    assert v["ffn_dim"] == 512 and v["first_dense_layers"] == 0 and i.unexpressed == []
    lead = imp_of(base(num_experts=8, num_experts_per_tok=2, mlp_only_layers=[0, 1]))
    assert lead.values["first_dense_layers"] == 2


@pytest.mark.parametrize(
    "keys, dense",
    [
        ({"decoder_sparse_step": 2}, 2),  # Qwen2-MoE: layers 1 and 3 MoE ((i + 1) % 2 == 0)
        ({"decoder_sparse_step": 2, "mlp_only_layers": [3]}, 3),  # ... and layer 3 forced dense
        ({"interleave_moe_layer_step": 2}, 2),  # Llama 4 Maverick: range(1, 4, 2)
        ({"moe_layers": [3]}, 3),
        ({"moe_layer_freq": [0, 1, 1, 0]}, 2),  # MiMo-V2-Flash: one flag per layer
        ({"first_k_dense_replace": 1, "moe_layer_freq": 2}, 3),  # DeepSeek-V2: i >= 1 and i % 2 == 0: {2}
    ],
)
def test_interleaved_moe_layers_are_counted(keys, dense):
    """Dense layers anywhere are a count: every decoder-layer op carries the layer average, so where
    they sit changes no cost (components/models/experts.py); nothing is left unexpressed."""
    i = imp_of(base(num_experts=8, num_experts_per_tok=2, **keys))
    assert i.values["first_dense_layers"] == dense and i.unexpressed == []
    assert f"{dense} dense of 4 layers" in i.why["first_dense_layers"]


def test_mha_gelu_tied_and_text_config():
    d = base(hidden_act="gelu_new", tie_word_embeddings=True)
    del d["num_key_value_heads"]
    i = imp_of(d)
    assert (
        i.values["n_kv_heads"] == 4 and i.values["ffn_act"] == "gelu" and i.values["tied_embeddings"] is True
    )
    gemma = imp_of(base(model_type="gemma", hidden_act="gelu_pytorch_tanh"))
    assert gemma.values["ffn_act"] == "swiglu"  # GeGLU: gate + up + down
    odd = imp_of(base(hidden_act="relu2"))
    assert any(u.startswith("hidden_act=relu2") for u in odd.unexpressed)
    nested = imp_of({"model_type": "llava", "text_config": base(), "vision_config": {"hidden_size": 64}})
    assert nested.values["d_model"] == 256 and "(outer) vision_config" in nested.unused
    gap = imp_of(base(attention_chunk_size=8192))
    assert any(u.startswith("attention_chunk_size=8192") for u in gap.unexpressed)


def test_missing_fields_are_one_error():
    d = base()
    del d["hidden_size"], d["vocab_size"]
    with pytest.raises(decodelab.errors.ConfigError, match=r"has no hidden_size, vocab_size \(required"):
        imp_of(d)
    with pytest.raises(decodelab.errors.ConfigError, match="num_experts_per_tok"):
        imp_of(base(num_local_experts=8))
    with pytest.raises(
        decodelab.errors.ConfigError, match=r"num_hidden_layers='4' must be a positive integer"
    ):
        imp_of(base(num_hidden_layers="4"))


# ------------------------------------------------------------------------------ the command


def test_cli_writes_the_user_conf_dir(tmp_path):
    res = cli(tmp_path, "import-model", str(HF / "gpt-oss-120b" / "config.json"))
    assert res.rc == 0, res.explain()
    out = tmp_path / "my_conf" / "model" / "gpt_oss_120b_hf.yaml"  # shipped name taken: _hf
    assert out.is_file()
    assert "wrote my_conf/model/gpt_oss_120b_hf.yaml: gpt_oss -> arch=hybrid, 36 layers, 116.79B" in res.out
    assert "unused config.json fields (14): architectures," in res.out
    assert "use it: decodelab model=gpt_oss_120b_hf 'hydra.searchpath=[file://my_conf]'" in res.out
    assert "workload.weight_dtype=mxfp4" in res.out
    assert yaml.safe_load(out.read_text())["layer_pattern"] == ["sliding", "full"]
    again = cli(tmp_path, "import-model", str(HF / "gpt-oss-120b" / "config.json"))
    assert (
        again.rc == 2
        and again.err.strip() == f"error: {out.relative_to(tmp_path)} exists (--force to overwrite it)"
    )


@pytest.mark.parametrize(
    "content, args, message",
    [
        ("{not json", [], "is not JSON (Expecting property name"),
        ("[1, 2]", [], "holds a JSON list, not the object of a config.json"),
        (
            json.dumps({"model_type": "x", "hidden_size": 8}),
            [],
            "has no num_hidden_layers, num_attention_heads",
        ),
        (json.dumps(base()), ["--name", "a b"], "--name 'a b' must be letters, digits"),
    ],
)
def test_cli_bad_input_is_one_error_line(tmp_path, content, args, message):
    p = tmp_path / "config.json"
    p.write_text(content)
    res = cli(tmp_path, "import-model", str(p), *args)
    assert res.rc == 2, res.explain()
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.err
    assert "Traceback" not in res.text


def test_cli_stdout_prints_the_yaml_alone(tmp_path):
    res = cli(tmp_path, "import-model", str(HF / "Llama-3.1-8B" / "config.json"), "--stdout")
    assert res.rc == 0, res.explain()
    doc = yaml.safe_load(res.out)  # the report went to stderr
    assert doc["name"] == "llama_3_1_8b" and doc["head_dim"] == 128
    assert "unused config.json fields (11):" in res.err
    assert not (tmp_path / "my_conf").exists()
    assert cli(tmp_path, "import-model", "--help").rc == 0


def test_generation_config_beside_config_json_gives_the_sampling_defaults(tmp_path):
    """A generation_config.json next to config.json (Qwen3-32B's: do_sample, temperature 0.6,
    top_k 20, top_p 0.95, token ids) becomes `generation_defaults` with the sampling keys only, and
    the imported model on vLLM then takes the sort path (opcost/sampler.py); without the file the
    field is not written."""
    from decodelab.core.checks import check_config
    from decodelab.opcost import sampler

    ckpt = tmp_path / "Qwen3-32B"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((HF / "Qwen3-32B" / "config.json").read_text())
    gen = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
           "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95}  # fmt: skip
    (ckpt / "generation_config.json").write_text(json.dumps(gen))
    r = cli(
        tmp_path,
        "import-model",
        str(ckpt / "config.json"),
        "--name",
        "q32",
        "--out-dir",
        str(tmp_path / "conf"),
    )
    assert r.rc == 0, r.err
    text = (tmp_path / "conf" / "model" / "q32.yaml").read_text()
    assert "generation_defaults: {temperature: 0.6, top_k: 20, top_p: 0.95}" in text
    cfg = compose(
        ["model=q32", searchpath(tmp_path / "conf"), "engine=vllm", "hardware=h100_sxm", "tracking=off"]
    )
    check_config(cfg)
    assert sampler.path(cfg) == "sort"
    (ckpt / "generation_config.json").unlink()
    r = cli(tmp_path, "import-model", str(ckpt / "config.json"), "--name", "q32b", "--stdout")
    assert r.rc == 0 and "generation_defaults" not in r.out


# ------------------------------------------------------------------------------ published counts

CONFIGS = ROOT / "tests" / "data" / "hf_configs"
# (config, published total, published active or None), in billions: the model card or paper
# (tests/data/hf_configs/README.md gives each source). Totals agree within 1%; the published
# active counts are rounded to two digits (37B, 3.3B), so within 2%.
PUBLISHED = [
    ("Llama-3.1-8B", 8.03, None),
    ("Llama-3.2-1B", 1.24, None),  # tied
    ("Mistral-7B-v0.1", 7.24, None),
    ("Qwen2.5-7B", 7.61, None),
    ("Qwen2.5-0.5B", 0.49, None),  # tied
    ("gemma-2-2b", 2.61, None),  # tied by default, alternating sliding / full
    ("gemma-2-9b", 9.24, None),
    ("gemma-3-1b-pt", 1.00, None),  # five sliding layers in six
    ("Phi-3-mini-4k-instruct", 3.82, None),
    ("Mixtral-8x7B-v0.1", 46.7, 12.9),
    ("DeepSeek-V3", 671.0, 37.0),  # without the 14B MTP module
    ("Qwen3-30B-A3B", 30.5, 3.3),
    ("OLMo-2-0425-1B", 1.48, None),
]


def import_file(name: str):
    path = CONFIGS / f"{name}.json"
    return hf_model.from_config(hf_model.load_json(str(path)), "m", str(path))


@pytest.mark.parametrize("name, total, active", PUBLISHED)
def test_parameter_counts_match_the_published_ones(name, total, active):
    imp = import_file(name)
    p = hf_yaml.parameters(imp)  # components/models ARCHITECTURES[arch].param_counts, as core/build.py
    assert p["total"] / 1e9 == pytest.approx(total, rel=0.01), name
    if active is not None:
        assert p["active"] / 1e9 == pytest.approx(active, rel=0.02), name
    assert imp.unexpressed == []


@pytest.mark.slow
def test_gemma2_2b_ties_by_default_and_alternates_sliding_and_full_layers(tmp_path):
    """Issue 40 item 6: config.json has no tie_word_embeddings (Gemma2Config ties by default) and no
    layer_types (Gemma2Config builds sliding on even layers, full on odd): 2.61B, not the 3.20B of
    an untied head (+ 256000 x 2304 = 0.59B) with every layer sliding."""
    imp = import_file("gemma-2-2b")
    v = imp.values
    assert v["tied_embeddings"] is True and "gemma2 default true" in imp.why["tied_embeddings"]
    assert (v["arch"], v["layer_pattern"], v["sliding_window"]) == ("hybrid", ["sliding", "full"], 4096)
    assert v["head_dim"] == 256 and v["ffn_act"] == "swiglu"  # 8 x 256 = 2048 != 2304: head_dim given
    assert any(n.startswith("attn_logit_softcapping=50.0") for n in imp.notes)
    assert any(n.startswith("final_logit_softcapping=30.0") for n in imp.notes)
    # by hand: embed 256000 x 2304 = 589,824,000; layer q/o 2 x 2304 x 2048 + k/v 2 x 2304 x 1024 =
    # 14,155,776, MLP 3 x 2304 x 9216 = 63,700,992, 2 norms 4,608; x 26 + final norm 2304
    assert hf_yaml.parameters(imp)["total"] == 589_824_000 + 26 * 77_861_376 + 2304 == 2_614_222_080
    out = tmp_path / "model" / "gemma2_2b.yaml"
    out.parent.mkdir()
    out.write_text(hf_yaml.to_yaml(imp, hf_yaml.parameters(imp)))
    r = decodelab.evaluate("model=gemma2_2b", searchpath(tmp_path), "hardware=h100_sxm", "tracking=off")
    assert r.ok, r.reason


def test_gemma3_text_config_left_to_the_transformers_defaults():
    """Gemma-3-4B's config.json sets only six text_config keys; Gemma3TextConfig supplies the heads,
    head_dim, vocabulary and the 5:1 sliding pattern, each marked in its YAML comment."""
    d = {
        "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "sliding_window": 1024},
        "vision_config": {"hidden_size": 1152},
    }  # fmt: skip
    imp = imp_of(d)
    v = imp.values
    assert (v["n_heads"], v["n_kv_heads"], v["head_dim"], v["vocab_size"]) == (8, 4, 256, 262208)
    assert v["layer_pattern"] == ["sliding"] * 5 + ["full"] and v["sliding_window"] == 1024
    assert v["tied_embeddings"] is True and v["qk_norm"] is True
    assert "not in config.json: the gemma3_text default" in imp.why["n_heads"]
    assert any("vocab_size=262208" in n for n in imp.notes)


# ------------------------------------------------------------------------------ refusals

REFUSED = [
    (base(num_key_value_heads=8), "num_key_value_heads=8 must divide num_attention_heads=4 (allowed: 1, 2, 4)"),
    (base(num_attention_heads=6, num_key_value_heads=4, hidden_size=384), "num_key_value_heads=4 must divide"),
    (base(num_local_experts=8, num_experts_per_tok=10), "num_experts_per_tok=10 must be in [1, num_local_experts=8]"),
    ({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "state_size": 16, "vocab_size": 50280},
     "model_type=mamba is a state-space (Mamba) model"),
    (base(model_type="qwen3_next", layer_types=["linear_attention"] * 3 + ["full_attention"]),
     "model_type=qwen3_next is a hybrid with linear-attention layers"),
    (base(model_type="llama", ssm_state_size=128), "has ssm_state_size (a state-space / linear-attention layer)"),
    (base(layer_types=["mamba", "attention"] * 2), "layer_types has mamba: import-model writes attention layers"),
    (base(model_type="newarch", tie_word_embeddings=False, expert_gate_bias=True),
     "model_type=newarch is not known to import-model and has fields it cannot map: expert_gate_bias"),
    (base(model_type="newarch"), "has no tie_word_embeddings and model_type=newarch has no default known"),
    ({k: w for k, w in base().items() if k != "num_attention_heads"}, "has no num_attention_heads (required"),
]  # fmt: skip


@pytest.mark.parametrize("d, message", REFUSED)
def test_what_cannot_be_represented_is_refused(tmp_path, d, message):
    with pytest.raises(decodelab.errors.ConfigError) as e:
        imp_of(d)
    assert message in str(e.value)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    res = cli(tmp_path, "import-model", str(p), "--stdout")
    lines = res.err.strip().splitlines()
    assert res.rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.err
    assert "Traceback" not in res.text and res.out == ""


def test_unknown_model_type_with_only_mapped_keys_reads_as_llama():
    imp = imp_of(base(model_type="newarch", tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6))
    assert imp.values["arch"] == "dense" and imp.values["tied_embeddings"] is True
    assert any("newarch is not known to import-model: read as a Llama-like decoder" in n for n in imp.notes)


def test_a_shipped_name_asked_for_is_written_and_noted(tmp_path):
    """--name of a shipped model writes that file (a run on its folder then uses it in place of
    the shipped one, with a note); without --name such a checkpoint gets `_hf`."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(base()))
    res = cli(tmp_path, "import-model", str(p), "--name", "llama3_1_8b")
    assert res.rc == 0, res.explain()
    assert (tmp_path / "my_conf" / "model" / "llama3_1_8b.yaml").is_file()
    assert "in place of the shipped one" in res.out


@pytest.mark.parametrize(
    "config, name",
    [
        ("Llama-4-Scout-17B-16E-Instruct", "llama4_scout_17b_16e"),
        ("Llama-4-Maverick-17B-128E-Instruct", "llama4_maverick_17b_128e"),
    ],
)
def test_llama4_imports_as_the_shipped_files(config, name):
    """llama4_text (framework/config/hf_llama4.py): the dense MLP from intermediate_size_mlp, the experts and the
    one shared expert from intermediate_size, chunked attention on three layers in four (no_rope_layers'
    default) as a window of attention_chunk_size, Maverick's MoE in every second layer: the hand-written files."""
    assert_import_matches_shipped(CONFIGS / f"{config}.json", name)
