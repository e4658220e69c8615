"""The optional columns of a measured serving CSV (docs/validation.md "The CSV"): a bad cell of
`kv_dtype`, the client columns or `launch` is one error naming its data row, never a default taken
in silence; a `launch` naming an aic_mapping.yaml `launches` entry runs the row with that entry's
engine file and overrides (runs/validation_columns.py)."""

from __future__ import annotations

import pytest
from decodelab.runs.validation import read_rows

HEAD = "model,engine,engine_version,system,precision,tp,isl,osl,concurrency,ttft_ms,tpot_ms"
ROW = "deepseek-ai/DeepSeek-R1,sglang,0.5.7,h200_sxm,fp8,8,1024,1024,8,330.6,12.8"


def _csv(tmp_path, extra_head: str, *cells: str):
    p = tmp_path / "rows.csv"
    p.write_text(f"{HEAD},{extra_head}\n" + "".join(f"{ROW},{c}\n" for c in cells))
    return p


@pytest.mark.parametrize(
    "col, cell, message",
    [
        ("range_ratio", "0", "range_ratio=0 must be a number in (0, 1]"),
        ("range_ratio", "1.2", "range_ratio=1.2 must be a number in (0, 1]"),
        ("range_ratio", "abc", "range_ratio='abc' must be a number in (0, 1]"),
        ("requests_per_client", "0", "requests_per_client=0 must be a positive integer"),
        ("requests_per_client", "2.5", "requests_per_client=2.5 must be a positive integer"),
        ("warmup_per_client", "-1", "warmup_per_client=-1 must be an integer >= 0"),
        ("prompt_bytes_per_token", "-3", "prompt_bytes_per_token=-3 must be a number > 0"),
        ("kv_dtype", "foo", "kv_dtype='foo' is not one of: fp32, bf16"),
        ("launch", "bogus", "launch='bogus' is not one of: auto, aic, defaults, or a `launches` entry"),
    ],
)
def test_a_bad_optional_cell_names_its_row(tmp_path, col, cell, message):
    p = _csv(tmp_path, col, "", cell)  # the first data row's empty cell keeps the default
    with pytest.raises(ValueError) as e:
        read_rows(p)
    assert str(e.value).startswith(f"rows.csv data row 2: {message}")


def test_empty_and_good_optional_cells_are_accepted(tmp_path):
    p = _csv(tmp_path, "range_ratio,requests_per_client,warmup_per_client,kv_dtype", ",,,", "0.8,10,0,bf16")
    _, items = read_rows(p)
    assert [n for n, _, _ in items] == [1, 2]
    assert "workload.kv_dtype=bf16" in items[1][1] and "workload.kv_dtype=fp8" in items[0][1]


def test_a_named_launch_runs_with_its_entry(tmp_path):
    """InferenceX's SGLang DeepSeek H200 launch (aic_mapping.yaml `inferencex-sglang-dsr1-h200`): BF16
    KV, no mixed chunks, 32,768-token steps; `auto` and `defaults` name none, `aic` its rules."""
    p = _csv(tmp_path, "launch", "inferencex-sglang-dsr1-h200", "auto", "defaults", "aic")
    df, items = read_rows(p)
    named = items[0][1]
    for o in ("workload.kv_dtype=bf16", "engine.mixed_steps=false", "engine.max_tokens_per_step=32768"):
        assert o in named
    assert not any("mixed_steps" in o for _, key, _ in items[1:] for o in key)
    assert list(df["launch"]) == ["inferencex-sglang-dsr1-h200", "", "defaults", "aic"]


def test_the_public_figures_file_maps_every_row():
    """docs/journal/data/public_serving_figures.csv (journal 2026-12-01-public-figures.md): its 19 rows
    map, the InferenceX rows under their named launch, the TensorRT-LLM ones on the engine file."""
    from pathlib import Path

    p = Path(__file__).resolve().parents[1] / "docs/journal/data/public_serving_figures.csv"
    df, items = read_rows(p)
    assert len(items) == 19 and all(key[0] != "unmapped" for _, key, _ in items)
    sglang = [key for _, key, row in items if row["engine"] == "sglang"]
    assert len(sglang) == 4 and all("engine.max_tokens_per_step=32768" in key for key in sglang)
    assert list(df["launch"]).count("defaults") == 15
