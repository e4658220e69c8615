"""Expert parallelism with all-to-all dispatch and combine (`hardware.moe_mapping=a2a` with
data-parallel MLA attention; components/models/experts.py, docs/model.md, "MoE decode step" and
"Parallelism beyond tensor parallelism"): the bytes worked by hand, the step's collective time, the
kernel against the reference, and the combinations that are not modelled."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import compose_cfg
from decodelab.components.models.experts import a2a_bytes
from decodelab.core import kernel as K
from decodelab.core.build import build
from decodelab.core.checks import check_config
from decodelab.core.reference import reference_simulate
from decodelab.errors import ConfigError
from decodelab.kernel_layout import CAUSES
from decodelab.modes.dispatch import evaluate

# a toy MLA + MoE model: 8 experts, top-2, d = 1024, 4 chips (2 experts each), every layer MoE
TOY = (
    "model=deepseek_v3",
    "model.n_experts=8",
    "model.experts_per_token=2",
    "model.n_shared_experts=1",
    "model.first_dense_layers=0",
    "model.d_model=1024",
    "model.n_layers=4",
    "model.expert_ffn_dim=512",
    "model.n_mtp_modules=0",
    "hardware=dgx_h100",
    "hardware.n_chips=4",
    "hardware.tensor_parallel=4",
    "hardware.mla_mapping=data",
    "hardware.op_model=roofline",  # the fitted all-gather law would cost the ep design's collectives
    "workload.batch_size=8",
    "workload.prompt_len=256",
    "workload.output_len=8",
)


def test_a2a_bytes_by_hand():
    # E = 8 experts on tp = 4 chips: 2 a chip. A token's 2 experts both miss a given other chip
    # with probability C(6, 2) / C(8, 2) = 15/28, so it is sent to 3 x 13/28 = 39/28 other chips.
    # Batch 8: the busiest chip holds ceil(8/4) = 2 of the 8 sequences (1/4 of the step's tokens).
    # Bytes per step token: 1/4 x 39/28 x d x 2 B = 1/4 x 39/28 x 2048 = 713.142857 B.
    m = compose_cfg(*TOY).model
    assert a2a_bytes(m, 4, 8, 2.0) == pytest.approx(0.25 * 39 / 28 * 2048, rel=1e-12)
    assert a2a_bytes(m, 4, 5, 2.0) == pytest.approx(2 / 5 * 39 / 28 * 2048, rel=1e-12)  # ceil(5/4)=2
    assert a2a_bytes(m, 1, 8, 2.0) == 0.0  # one chip: nothing leaves it
    # DeepSeek-V3 on 8 chips: 32 experts a chip, top-8: 7 x (1 - C(224, 8) / C(256, 8)) other chips
    ds = compose_cfg("model=deepseek_v3").model
    hit = 7 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert hit == pytest.approx(4.633, abs=1e-3)
    assert a2a_bytes(ds, 8, 64, 2.0) == pytest.approx(hit * 7168 * 2 / 8, rel=1e-12)


def test_a2a_collective_time_by_hand():
    # The only difference from moe_mapping=ep (same experts per chip, same weights read) is the
    # bytes of the two collectives around each MoE layer: dispatch + combine of 713.142857 B per
    # step token each instead of the all-gather + reduce-scatter of (tp-1)/tp x d x 2 = 1536 B.
    # A decode step of 8 tokens, 4 layers, 2 collectives, 450 GB/s: the a2a design's collective
    # time is 4 x 2 x 8 x (713.142857 - 1536) / 450e9 s = -0.11700 us per step (latency unchanged).
    ep = evaluate(compose_cfg(*TOY, "hardware.moe_mapping=ep"))
    a2a = evaluate(compose_cfg(*TOY, "hardware.moe_mapping=a2a"))
    assert ep.status == a2a.status == "ok"
    diff = (a2a.metrics["tpot_collectives_ms"] - ep.metrics["tpot_collectives_ms"]) * 1e-3
    assert diff == pytest.approx(4 * 2 * 8 * (0.25 * 39 / 28 * 2048 - 1536) / 450e9, rel=1e-6)
    for k in ("tpot_memory_ms", "tpot_compute_ms", "mem_hbm_gib"):
        assert a2a.metrics[k] == ep.metrics[k]


def test_kernel_matches_reference():
    cfg = compose_cfg(
        "model=deepseek_v3",
        "hardware=dgx_h100",
        "hardware.n_chips=16",
        "hardware.tensor_parallel=16",
        "hardware.mla_mapping=data",
        "hardware.moe_mapping=a2a",
        "workload.weight_dtype=fp8",
        "workload.batch_size=24",
    )
    d = build(cfg)
    steps = np.vstack([K.request_steps(24, 1000, 3), [[16, 500, 5, 1, 0]]])
    out = K.simulate(*d.arrays(), steps)
    for r, row in enumerate(reference_simulate(d, cfg, steps)):
        for k, cause in enumerate(CAUSES):
            assert math.isclose(out[r, k], row[cause], rel_tol=1e-9, abs_tol=1e-15), (r, cause)


def test_mapping_ep_and_tp_unchanged_by_a2a_code():
    # moe_mapping=tp and ep keep the all-gather / reduce-scatter (or all-reduce) collectives
    for mapping in ("tp", "ep"):
        d = build(compose_cfg(*TOY, f"hardware.moe_mapping={mapping}"))
        op = next(o for o in d.ops if o.name == "mlp_allreduce")
        assert op.coll_kind == "all_gather" and op.link_bytes_per_token == pytest.approx(1536.0)


@pytest.mark.parametrize(
    "overrides",
    [
        ("model=deepseek_v3", "hardware=dgx_h100", "hardware.moe_mapping=a2a"),  # TP attention
        ("model=qwen3_30b_a3b", "hardware=dgx_h100", "hardware.moe_mapping=a2a"),  # GQA: no DP attention
    ],
)
def test_a2a_needs_data_parallel_attention(overrides):
    with pytest.raises(ConfigError) as e:
        check_config(compose_cfg(*overrides))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("hardware.moe_mapping=a2a needs data-parallel attention")


def test_bad_mapping_names_allowed_values():
    with pytest.raises(ConfigError) as e:
        check_config(compose_cfg("model=deepseek_v3", "hardware=dgx_h100", "hardware.moe_mapping=all2all"))
    assert "hardware.moe_mapping='all2all' is not one of: tp, ep, a2a" in str(e.value)
