"""DeepSeek Sparse Attention (components/models/dsa.py): the cache per token (latent + index key),
the tokens a decode step attends (capped latent, uncapped index keys), the indexer's bytes and
FLOPs, serving prefill pairs, import-model and one validate smoke row of GLM-5."""

import csv

import numpy as np
import pytest
from decodelab.components.models import dsa, layers
from decodelab.config import hf_model
from decodelab.core.build import build
from decodelab.core.kv_costs import attended_at
from decodelab.modes.serving import parts
from decodelab.modes.serving.layout import Eng
from decodelab.modes.serving.engine_vector import sliding_fields
from decodelab.runs.validation import model_config_name, run_validation

# GLM-5 under an FP8 cache: latent 512 FP8 + 512/128 = 4 FP32 scales + 64 rope BF16
# = 512 + 16 + 128 = 656 B; index key 128 FP8 + 1 FP32 scale = 132 B; 788 B per token and layer
LAT, IDX = 656.0, 132.0
GLM5 = ("model=glm_5", "hardware=b200_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8")
FP8 = ("workload.weight_dtype=fp8", "workload.kv_dtype=fp8")


def test_cache_bytes_per_token_hold_the_index_key(compose):
    m = compose("model=glm_5").model
    assert dsa.latent_bytes(m, 1.0) == LAT
    assert dsa.index_bytes(m) == IDX
    assert layers.kv_bytes_per_token(m, 1.0) == 78 * 788  # = 61,464 B
    # BF16 cache: (512 + 64) x 2 = 1152 B latent + 132 B index key = 1284 B x 78 = 100,152 B
    assert layers.kv_bytes_per_token(m, 2.0) == 100_152
    # DeepSeek-V3.2: 61 layers x 788 = 48,068 B (DeepSeek-V3's dense MLA: 61 x 576 = 35,136 B)
    assert layers.kv_bytes_per_token(compose("model=deepseek_v3_2").model, 1.0) == 48_068
    # GLM-5.2: 21 of 78 layers keep an index key: 78 x 656 + 21 x 132 = 51,168 + 2,772 = 53,940
    assert layers.kv_bytes_per_token(compose("model=glm_5_2").model, 1.0) == pytest.approx(53_940)


def test_decode_attends_all_index_keys_and_topk_latents(compose):
    d = build(compose(*GLM5, *FP8, "workload.prompt_len=8192", "workload.output_len=64"))
    # ctx 1024 <= top-k 2048: every token, both parts: 1024 token-equivalents
    assert attended_at(d, 512.0, 1024.0) == pytest.approx(1024.0)
    # ctx 16384: (132 x 16384 + 656 x 2048) / 788 = (2,162,688 + 1,343,488) / 788 = 4449.46
    x = attended_at(d, 8192.0, 16384.0)
    assert x == pytest.approx(3_506_176 / 788)
    # the ops reading the cache: indexer_score 132 B and attention 656 B per token-equivalent, so
    # one layer's step reads 132 x 16384 index-key bytes + 656 x 2048 latent bytes per sequence
    reads = {o.name: o.kv_read_per_ctx for o in d.ops if o.kv_read_per_ctx and o.path != "prefill"}
    assert reads == {"indexer_score": IDX, "attention": LAT}
    assert sum(reads.values()) * x == pytest.approx(132 * 16384 + 656 * 2048)
    # the dense model would read all 16384 latents: 656 x 16384 = 10.7 MB vs 3.5 MB


def test_indexer_ops_per_chip(compose):
    d = build(compose(*GLM5, *FP8, "workload.prompt_len=1024", "workload.output_len=64"))
    ops = {o.name: o for o in d.ops}
    # every chip runs all 32 index heads (reference code: plain Linear, not column-parallel)
    assert ops["indexer_q_proj"].weight_bytes == 2048 * 32 * 128  # wq_b in FP8: 8,388,608 B
    assert ops["indexer_k_proj"].weight_bytes == 6144 * 128
    assert ops["indexer_weights_proj"].weight_bytes == 6144 * 32
    assert ops["indexer_k_write"].kv_write_per_token == IDX
    assert ops["kv_norm_rope_write"].kv_write_per_token == LAT
    # score: 2 x 32 x 128 FLOPs per (query, key) + relu and weighted sum 2 x 32 = 8256
    assert ops["indexer_score"].attn_flops_per_ctx == 8256.0
    # main decode attention: 8 of 64 heads per chip, 2 x 8 x (2 x 512 + 64) = 17,408 per pair
    assert ops["attention"].attn_flops_per_ctx == 17_408.0
    assert ops["attention"].attn_heads == 0.0  # the dense MLA decode table does not price it


def test_serving_prefill_pairs_cap_the_latent_share(compose):
    d = build(
        compose(*GLM5, *FP8, "workload=closed_loop", "workload.prompt_len=8192", "workload.output_len=64")
    )
    f = sliding_fields(d, None)
    assert f == {
        "slide": 0.0,
        "window": 0.0,
        "slide_mem": 0.0,
        "sparse": pytest.approx(LAT / 788),
        "topk": 2048.0,
    }
    eng = np.zeros(Eng.size)
    eng[Eng.SPARSE], eng[Eng.TOPK] = f["sparse"], f["topk"]
    # prefill of 8192 tokens: causal 8192 x 8192 - 8192 x 8191 / 2 = 33,558,528 pairs (the indexer's);
    # top-k capped: queries 1..2048 see p keys (2049 x 2048 / 2 = 2,098,176), the other 6144 see
    # 2048 (12,582,912): 14,681,088 (the latent's); mixed by the byte shares 132 : 656
    want = (132 * 33_558_528 + 656 * 14_681_088) / 788
    assert parts.layer_pairs(8192.0, 8192.0, eng) == pytest.approx(want)
    # the pool holds every token whole: 8192 tokens -> 8192 token-equivalents (x 788 B x 78)
    assert parts.mem_tokens(8192.0, eng) == pytest.approx(8192.0)
    assert parts.read_tokens(1.0, 16384.0, eng) == pytest.approx(3_506_176 / 788)


def test_existing_mla_keeps_dense_attention(compose):
    m = compose("model=deepseek_v3").model
    assert not dsa.is_dsa(m)
    assert layers.kv_bytes_per_token(m, 2.0) == 61 * 576 * 2  # 70,272 B, unchanged
    assert "sparse" not in layers.kv_layer_mix(m, 2.0)


@pytest.mark.parametrize(
    "model, name",
    [
        ("deepseek-ai/DeepSeek-V3.2", "deepseek_v3_2"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v3_2"),
        ("nvidia/DeepSeek-V3.2-NVFP4", "deepseek_v3_2"),
        ("zai-org/GLM-5-FP8", "glm_5"),
        ("nvidia/GLM-5-NVFP4", "glm_5"),
        ("zai-org/GLM-5.1", "glm_5_1"),
        ("zai-org/GLM-5.2-FP8", "glm_5_2"),
        ("nvidia/GLM-5.3-NVFP4", "glm_5_3"),
    ],
)
def test_checkpoints_map_to_dsa_configs(model, name):
    assert model_config_name(model) == name


GLM5_JSON = {  # zai-org/GLM-5 config.json, the keys that shape the model
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 78,
    "hidden_size": 6144,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "intermediate_size": 12288,
    "moe_intermediate_size": 2048,
    "vocab_size": 154880,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_topk": 2048,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "indexer_rope_interleave": True,
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "max_position_embeddings": 202752,
}


def test_import_model_reads_the_indexer():
    imp = hf_model.from_config(dict(GLM5_JSON), "glm_5")
    v = imp.values
    assert (v["arch"], v["index_topk"], v["index_n_heads"], v["index_head_dim"]) == ("mla", 2048, 32, 128)
    assert "index_layers" not in v  # every layer has its indexer
    assert not any("index" in u for u in imp.unexpressed)
    shared = dict(GLM5_JSON, indexer_types=["full"] * 3 + (["shared"] * 3 + ["full"]) * 18 + ["shared"] * 3)
    assert hf_model.from_config(shared, "glm_5_2").values["index_layers"] == 21  # 3 + 18 of 78


def test_validate_runs_a_glm5_row(tmp_path):
    """A synthetic GLM-5 serving row (placeholder measurements) is predicted, not refused."""
    head = (
        "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
        "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,"
        "moe_ep_size,silicon_ttft_ms,silicon_tpot_ms"
    ).split(",")
    row = ["glm5_smoke", "synthetic; silicon_concurrency=8", "sglang", "0.5.9", "zai-org/GLM-5-FP8"]
    row += ["b200_sxm", "fp8", "agg", 1024, 256, "fp8_block", "fp8_block", 8, 8, 1, 1, 8, 1, 1000.0, 30.0]
    p = tmp_path / "rows.csv"
    with p.open("w", newline="") as fh:
        csv.writer(fh).writerows([head, row])
    df = run_validation(p)
    assert list(df["status"]) == ["ok"]
    assert df["tpot_pred"].iloc[0] > 0 and df["ttft_pred"].iloc[0] > 0
