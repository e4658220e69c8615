"""Kimi-K3 (conf/model/kimi_k3.yaml): Kimi Delta Attention layers beside gated MLA ones
(components/models/linear_attn.py kda, mla_attn.py), a latent MoE, Block Attention Residuals (attn_res.py).
Parameter counts against the published ones, cache and state bytes and the new ops' weights worked by hand,
the serving kernel against its reference, the importer against the shipped file, one validate row per
engine, the refusals of bad fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_aic_rows_run, assert_import_matches_shipped, assert_serve_matches_reference
from conftest import compose_cfg
from decodelab.components.models import attn_res, layers, linear_attn
from decodelab.core.build import build
from decodelab.errors import ConfigError

HF = Path(__file__).parent / "data" / "hf_configs"
D, P = 7168, 96 * 128  # hidden size; a KDA layer's heads x head dim


def k3():
    return compose_cfg("model=kimi_k3").model


def b300(*more):
    return compose_cfg("model=kimi_k3", "hardware=b300_sxm", "hardware.n_chips=8", "hardware.tensor_parallel=8",
                       "workload.weight_dtype=mxfp4", *more)  # fmt: skip


def test_parameters_match_the_published_ones():
    """NVIDIA NeMo AutoModel's Kimi-K3 page: 2.8T parameters, 104B active. A KDA layer's mixer by hand: q, k, v and
    the full-rank output gate 4 x 7168 x 12,288 = 352,321,536, o_proj 88,080,384, the decay gate's 7168 x 128 +
    128 x 12,288 = 2,490,368, beta 7168 x 96 = 688,128, conv1d 4 x 36,864 = 147,456, A_log 96, dt_bias 12,288,
    the norm 128: 443,740,384."""
    m = k3()
    assert linear_attn.params_per_layer(m) == 443_740_384
    p = layers.param_counts(m)
    assert p["total"] / 1e12 == pytest.approx(2.8, abs=0.025)
    assert (p["active"] - p["embed"]) / 1e9 == pytest.approx(104.0, abs=0.5)
    assert attn_res.params(m) == (4 * 93 + 2) * D  # two norms and two vectors a layer, the final mix's pair


def test_cache_and_state_bytes_by_hand():
    """24 MLA layers cache 512 + 64 elements a token: 24 x 576 x 2 B = 27,648 B in BF16. A KDA layer's state on
    one of 8 chips: 12 heads of 128 x 128 fp32 (786,432 B) and the conv state of 3 x 3 x 1536 BF16 (27,648 B),
    814,080 B (vLLM's mamba page at TP8); 69 layers: 56,171,520 B a sequence."""
    assert layers.kv_bytes_per_token(k3(), 2.0) == 27_648
    d = build(b300())
    assert d.memory["state_bytes_per_seq"] == 69 * 814_080


def test_gate_kda_and_mixes_ops_by_hand():
    """At TP8 in BF16: the MLA gate's g_proj 7168 x 12 x 128 x 2 B = 22,020,096 B on the 24 MLA layers; KDA's
    fused q, k, v, g, f_a, beta GEMM 7168 x (4 x 1536 + 128 + 12) x 2 B = 90,087,424 B on the 69 others; 187
    attention-residual mixes (2 a layer + the final one) of 995 / 187 sources on average (layer i mixes
    ceil(i / 12) snapshots + the running sum twice; the final mix all 8 + the sum)."""
    ops = {o.name: o for o in build(b300()).ops}
    assert (ops["g_proj"].weight_bytes, ops["g_proj"].repeat) == (22_020_096, 24)
    assert (ops["in_proj_qkvgfb"].weight_bytes, ops["in_proj_qkvgfb"].repeat) == (90_087_424, 69)
    assert ops["attention"].repeat == 24 and ops["attn_allreduce"].repeat == 93
    mix = ops["attn_res_mix"]
    assert mix.repeat == 187
    assert mix.act_bytes_per_token == pytest.approx((995 / 187 + 1) * D * 2)


def test_serving_kernel_matches_its_reference():
    cfg = b300(
        "engine=vllm", "workload=closed_loop", "workload.concurrency=4", "workload.n_requests=8",
        "workload.prompt_len=256", "workload.output_len=16", "workload.kv_dtype=fp8",
    )  # fmt: skip
    assert len(assert_serve_matches_reference(cfg)) > 0


def test_import_equals_the_shipped_file():
    assert_import_matches_shipped(HF / "Kimi-K3.json", "kimi_k3", arch="mla")


def test_rows_run_under_each_engine(tmp_path):
    """vLLM TP8 on B300; SGLang's W4A8 MXFP4 on GB300; TensorRT-LLM attention DP 16 x EP16 (each rank holds all
    KDA heads' states, for its own 64 sequences: AIConfigurator's batch per rank)."""
    rows = [
        "a,vllm,0.19.0,moonshotai/Kimi-K3,b300_sxm,mxfp4,agg,1024,1024,bfloat16,mxfp4,16,8,1,1,8,1,100,10\n",
        "b,sglang,0.5.8,moonshotai/Kimi-K3,gb300,w4a8_mxfp4_mxfp8,agg,8192,1024,bfloat16,mxfp4,32,8,1,1,8,1,100,10\n",
        "c,trtllm,1.3.0rc10,moonshotai/Kimi-K3,gb300,mxfp4,agg,1024,1024,bfloat16,mxfp4,64,1,1,16,1,16,100,10\n",
    ]
    assert_aic_rows_run(tmp_path, rows)


@pytest.mark.parametrize(
    "override, match",
    [
        ("model.linear_v_heads=48", "linear_kind=kda needs linear_k_heads = linear_v_heads"),
        ("model.layer_pattern=[linear,sliding]", r"layer_pattern\[1\]='sliding' is not one of: full, linear"),
        ("model.attn_res_block_size=-1", "attn_res_block_size=-1 must be >= 0"),
        ("model.linear_kind=rwkv", "linear_kind='rwkv' is not one of: gdn, mamba2, kda"),
    ],
)
def test_bad_fields_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        build(b300(override))
