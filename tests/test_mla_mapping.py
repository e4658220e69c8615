"""MLA attention across sockets (components/models/mla_map.py, `hardware.mla_mapping`): each
mapping's bytes per socket worked by hand for DeepSeek-R1 at TP16 (latent 512 + RoPE key 64 =
576 elements per token and layer, BF16 KV: 1152 B), and the three mappings evaluated on C13-C15."""

from __future__ import annotations

import pytest
from decodelab.components.models import layers
from decodelab.modes.dispatch import evaluate

LAT = (512 + 64) * 2  # B per token and layer


def _ops(compose, mapping, batch):
    m = compose("model=deepseek_r1").model
    return {o.name: o for o in layers.build_ops(m, 16, 1.0, 2.0, 2.0, batch, mla_mapping=mapping)}


@pytest.mark.parametrize(
    "mapping, batch, read_per_seq, seqs_on_busiest_chip",
    [
        ("replicated", 4, LAT, 4),  # every chip reads every sequence's whole latent
        ("context", 4, LAT / 16, 4),  # every chip reads 1/16 of every sequence's tokens
        ("data", 4, LAT, 1),  # each chip reads only its own ceil(4/16) = 1 sequence
        ("data", 32, LAT, 2),  # ceil(32/16) = 2
    ],
)
def test_latent_bytes_per_socket(compose, mapping, batch, read_per_seq, seqs_on_busiest_chip):
    a = _ops(compose, mapping, batch)["attention"]
    # bytes one chip reads per context token and layer for the whole batch
    assert batch * a.kv_read_per_ctx == pytest.approx(seqs_on_busiest_chip * read_per_seq)
    w = _ops(compose, mapping, batch)["kv_norm_rope_write"]
    assert batch * w.kv_write_per_token == pytest.approx(seqs_on_busiest_chip * read_per_seq)


def test_attention_weights_per_socket(compose):
    """q_b_proj (1536 x 128 heads x 192) and o_proj (128 x 128 x 7168), FP8: split 16 ways
    under replicated and context mappings, whole on every chip under data-parallel attention."""
    q_b, o = 1536 * 128 * 192, 128 * 128 * 7168
    for mapping, share in (("replicated", 16), ("context", 16), ("data", 1)):
        ops = _ops(compose, mapping, 4)
        assert ops["q_b_proj"].weight_bytes == q_b / share
        assert ops["o_proj"].weight_bytes == o / share


def test_link_bytes_per_socket(compose):
    """Per token and chip: replicated and context keep the two ring all-reduces
    (2 x 15/16 x 7168 x 2 B = 26,880 B each); context adds the query gather
    (15/16 x 128 x 576 x 2) and the partial-output + LSE merge (15/16 x 128 x 513 x 2) = 261,360 B;
    data-parallel attention swaps the all-reduces for an all-gather and a reduce-scatter of
    15/16 x 7168 x 2 = 13,440 B each."""
    rep, ctx, dp = (_ops(compose, mp, 4) for mp in ("replicated", "context", "data"))
    assert rep["attn_allreduce"].link_bytes_per_token == ctx["mlp_allreduce"].link_bytes_per_token == 26_880
    assert "cp_attention_exchange" not in rep
    ex = ctx["cp_attention_exchange"]
    assert ex.link_bytes_per_token == pytest.approx(261_360) and ex.n_collectives == 2
    assert dp["attn_allreduce"].link_bytes_per_token == dp["mlp_allreduce"].link_bytes_per_token == 13_440


def test_mapping_only_for_mla(compose):
    r = evaluate(compose("model=llama3_1_8b", "hardware=sn40l_rack16", "hardware.mla_mapping=context"))
    assert any("applies to MLA attention only" in n for n in r["notes"])


def test_bad_mapping_is_one_error_line(compose):
    from decodelab.core.checks import check_config
    from decodelab.errors import ConfigError

    with pytest.raises(ConfigError, match="hardware.mla_mapping"):
        check_config(compose("model=deepseek_r1", "hardware=sn40l_rack16", "hardware.mla_mapping=ring"))


@pytest.mark.slow
def test_mappings_on_the_c14_graphs(compose):
    """128k on the (131072, 1) graph: context parallelism reads 1/16 of the latent per chip (faster at
    batch 1); data-parallel attention reads every attention weight on every chip (slower); at the
    (4096, 4) graph the latent hardly matters. C13-C15 with each mapping:
    docs/journal/2026-11-23-kv-policies-and-c13-c15.md ("MLA across sockets: three mappings")."""
    base = (
        "model=deepseek_r1",
        "hardware=sn40l_rack16",
        "optimizations=all",
        "kv_policy=snapstream",
        "workload.weight_dtype=fp8",
        "workload.output_len=2048",
        "workload.static_graph=true",
    )
    tok = {
        (mp, p): evaluate(compose(*base, f"workload.prompt_len={p}", f"hardware.mla_mapping={mp}"))[
            "metrics"
        ]["tok_s_aggregate"]
        for mp in ("replicated", "context", "data")
        for p in (2048, 129024)
    }
    assert tok[("context", 129024)] > 1.2 * tok[("replicated", 129024)]
    assert tok[("data", 129024)] < 0.5 * tok[("replicated", 129024)]
    assert tok[("context", 2048)] == pytest.approx(tok[("replicated", 2048)], rel=0.06)
