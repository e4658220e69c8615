"""A q/k RMSNorm over the layer's whole q and k (model.qk_norm_scope layer: MiniMax-M2's config.json qk_norm_type
per_layer) under tensor parallelism: a sum kernel, one all-reduce of 2 fp32 per token and the scaling norm per
layer (components/models/dense.py qk_norm_reduce), by hand."""

from __future__ import annotations

import json

import pytest
from conftest import compose_cfg
from decodelab.config.hf_model import from_config
from decodelab.core.build import build
from decodelab.errors import ConfigError

MM = ("model=minimax_m2_5", "hardware=b200_sxm", "workload.weight_dtype=fp8_block", "engine=vllm_0_19")


def qk_ops(tp, *more):
    cfg = compose_cfg(*MM, f"hardware.n_chips={tp}", f"hardware.tensor_parallel={tp}", *more)
    return {op.name: op for op in build(cfg).ops if op.name.startswith("qk_norm")}


def test_tensor_parallel_adds_the_sum_and_its_all_reduce():
    """TP 4: 48 / 4 query and 8 / 4 KV heads of 128 per chip, q and k 1,792 BF16 per token. qk_norm_sum reads
    them once (3,584 B), the all-reduce sends 2 (4 - 1) / 4 x 8 B = 12 B per token (2 fp32, ring), the norm
    (qk_norm) reads and writes them (7,168 B), once per layer (62)."""
    ops = qk_ops(4)
    assert list(ops) == ["qk_norm_sum", "qk_norm_allreduce", "qk_norm"]
    s, r, n = ops["qk_norm_sum"], ops["qk_norm_allreduce"], ops["qk_norm"]
    assert (s.act_bytes_per_token, s.weight_bytes, n.act_bytes_per_token) == (3584.0, 0.0, 7168.0)
    assert (r.link_bytes_per_token, r.coll_bytes_per_token, r.n_collectives, r.coll_kind) == (
        12.0,
        8.0,
        1,
        "all_reduce",
    )
    assert {op.repeat for op in ops.values()} == {62}


def test_one_chip_or_per_head_norms_keep_one_kernel():
    assert list(qk_ops(1, "workload.weight_dtype=fp4")) == ["qk_norm"]  # fits one B200 in FP4
    assert list(qk_ops(4, "model.qk_norm_scope=head")) == ["qk_norm"]


def test_import_reads_qk_norm_type():
    """config.json qk_norm_type per_layer (MiniMax-M2.5) -> layer; per_head (MiniMax-M3) keeps the default."""
    base = json.loads(
        (__import__("pathlib").Path(__file__).parent / "data/hf/Qwen3-32B/config.json").read_text()
    )
    layer = from_config({**base, "use_qk_norm": True, "qk_norm_type": "per_layer"}, "m")
    head = from_config({**base, "use_qk_norm": True, "qk_norm_type": "per_head"}, "m")
    assert layer.values["qk_norm_scope"] == "layer"
    assert "qk_norm_scope" not in head.values


def test_a_bad_scope_is_one_error_line():
    with pytest.raises(ConfigError, match=r"model.qk_norm_scope='chip' is not one of: head, layer"):
        qk_ops(4, "model.qk_norm_scope=chip")


def test_a_dense_model_gets_the_same_ops():
    """The dense builder too (Qwen3-32B made per-layer, TP 2): sum, all-reduce (2 x 1 / 2 x 8 = 8 B per token),
    norm, each of 64 layers."""
    cfg = compose_cfg(
        "model=qwen3_32b", "hardware=dgx_h100", "hardware.tensor_parallel=2", "model.qk_norm_scope=layer"
    )
    ops = {op.name: op for op in build(cfg).ops if op.name.startswith("qk_norm")}
    assert list(ops) == ["qk_norm_sum", "qk_norm_allreduce", "qk_norm"]
    assert ops["qk_norm_allreduce"].link_bytes_per_token == 8.0 and ops["qk_norm"].repeat == 64
