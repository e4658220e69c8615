"""Launches one run measured at the same settings (framework/runs/aic_launches.py, aic_mapping.yaml `sweep`):
InferenceX's 2026-03-25 SGLang 0.5.9 B200 FP8 run swept dsr1-fp8-b200-sglang (TP8: 1k/1k and 1k/8k at 4-64
clients, 8k/1k at 4) and dsr1-fp8-b200-sglang-mtp (TP8, 4-512 clients at all three; nvidia-master.yaml
@12ba0ae07). A row only the MTP config swept runs as MTP; one both swept runs as each, the mean reported
(aic_candidates.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import inferencex_source, silicon_row
from decodelab.runs import aic_candidates, aic_launches, aic_rows
from decodelab.runs.aic_launches import engine_field
from decodelab.runs.aic_mapping import swept

NON_MTP, MTP, TP4 = (
    "inferencex-sglang-dsr1-b200-fp8-0325",
    "inferencex-sglang-dsr1-b200-fp8-mtp",
    "inferencex-sglang-dsr1-b200-fp8-tp4",
)


def ds_row(clients: int, isl: int, osl: int, tp: int = 8, measured="2026-03-25T16:34:14Z", version="0.5.9"):
    source = inferencex_source("DeepSeek-R1", clients, measured, "lmsysorg/sglang:v0.5.9-cu130")
    cells = {"backend": "sglang", "backend_version": version, "model_path": "deepseek-ai/DeepSeek-R1-0528"}
    cells.update(precision="fp8", isl=str(isl), osl=str(osl), tp_size=str(tp), batch_size=str(clients))
    cells.update(pp_size="1", attention_dp_size="1", moe_tp_size=str(tp), moe_ep_size="1")
    cells.update(silicon_ttft_ms="200", silicon_tpot_ms="10")
    return silicon_row(source, **cells)


def names(clients, isl, osl, tp=8, **kw):
    return [x["launch"] for x in aic_launches.launches_of(ds_row(clients, isl, osl, tp, **kw), tp, clients)]


@pytest.mark.parametrize(
    "clients, isl, osl, tp, want",
    [
        (4, 1024, 1024, 8, [NON_MTP, MTP]),  # both configs swept 1k/1k 4-64
        (64, 1024, 8192, 8, [NON_MTP, MTP]),
        (128, 1024, 1024, 8, [MTP]),  # the non-MTP sweep stops at 64
        (512, 1024, 8192, 8, [MTP]),
        (4, 8192, 1024, 8, [NON_MTP, MTP]),  # 8k/1k: the non-MTP config swept 4 clients only
        (8, 8192, 1024, 8, [MTP]),
        (8, 8192, 1024, 4, [TP4]),  # the MTP script runs TP8 only; TP4 is the -tp4 entry
    ],
)
def test_the_configs_a_run_swept_decide_the_launches(clients, isl, osl, tp, want):
    assert names(clients, isl, osl, tp) == want


def test_other_runs_keep_one_launch():
    """A row of another date (0.5.6, 2025-12-31) has no sweep: the undated FP8 entry alone; a row whose
    clients are not known cannot be placed in a sweep and takes the undated entry too."""
    assert names(128, 1024, 1024, measured="2025-12-31T15:18:00Z", version="0.5.6") == [
        "inferencex-sglang-dsr1-b200-fp8"
    ]
    assert aic_launches.launch_of(ds_row(32, 1024, 1024))["launch"] == "inferencex-sglang-dsr1-b200-fp8"


def test_swept_by_hand():
    row = ds_row(32, 1024, 8192)
    sweep = [{"isl": 1024, "osl": 8192, "gpus": 8, "clients": [4, 64]}]
    assert swept(None, row, 8, 32)  # no sweep: any row
    assert swept(sweep, row, 8, 4) and swept(sweep, row, 8, 64)  # the range is closed
    assert not swept(sweep, row, 8, 65) and not swept(sweep, row, 4, 32)
    assert not swept(sweep, row, 8, None) and not swept(sweep, row, 8, float("nan"))
    assert not swept([{**sweep[0], "osl": 1024}], row, 8, 32)


def test_the_mtp_launch_runs_as_its_script_set_it():
    """dsr1_fp8_b200_mtp.sh @12ba0ae07: EAGLE 2 steps (k = 2), --max-running-requests 512, --cuda-graph-max-bs 512
    (SGLang 0.5.9's speculative capture list), SGLANG_ENABLE_SPEC_V2 not exported: no overlap scheduler."""
    f = "sglang_inferencex_mtp"
    assert engine_field(f, ("mtp", "k")) == 2 and engine_field(f, ("max_batch",)) == 512
    assert engine_field(f, ("overlap",)) is False and engine_field(f, ("lookahead",)) is False
    spec = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, 513, 16)]
    assert engine_field(f, ("batch_buckets",)) == spec
    (mtp,) = aic_launches.launches_of(ds_row(256, 1024, 1024), 8, 256)
    assert mtp["engine_file"] == f
    (non, _) = aic_launches.launches_of(ds_row(32, 1024, 1024), 8, 32)
    assert non["engine_file"] == "" and "engine.max_batch=128" in non["launch_overrides"]


def test_an_open_row_runs_as_each_launch_and_reports_their_mean():
    row = ds_row(16, 1024, 1024)
    recs = aic_candidates.expand(aic_rows.to_row(row, 7), row, None)
    assert [(r["launch"], r["candidate"]) for r in recs] == [(NON_MTP, "1/2"), (MTP, "2/2")]
    assert recs[1]["engine_file"] == "sglang_inferencex_mtp" and recs[0]["engine_file"] == ""
    done = [{**r, "status": "ok", "ttft_pred": t, "tpot_pred": p, "ttft_meas": 200.0, "tpot_meas": 10.0, "tput_meas": 1.0}
            for r, t, p in zip(recs, (180.0, 220.0), (12.0, 8.0))]  # fmt: skip
    (out,) = aic_candidates.combine(pd.DataFrame(done)).to_dict("records")
    assert out["tpot_pred"] == pytest.approx(10.0) and out["ttft_pred"] == pytest.approx(200.0)
    assert out["launch"] == f"{NON_MTP} | {MTP}" and out["candidate"] == "2 of 2"
    assert out["tpot_err_pct"] == pytest.approx(0.0)
    one = ds_row(128, 1024, 1024)
    assert aic_candidates.expand(aic_rows.to_row(one, 8), one, None)[0].get("candidate") is None


def test_a_row_that_names_its_config_keeps_it():
    """The db-dump/2026-04-27 rows of the run record config_id=87, whose rows hold exactly the non-MTP TP8 sweep."""
    row = ds_row(16, 1024, 1024)
    row["silicon_data_source"] = (
        "db-dump/2026-04-27; config_id=87; silicon_concurrency=16; measured=2026-03-25T00:00:00.000Z; "
        "workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130"
    )
    assert [x["launch"] for x in aic_launches.launches_of(row, 8, 16)] == [NON_MTP]
