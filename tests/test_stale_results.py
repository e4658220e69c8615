"""Nothing stale (issue 40): a stored result is reused only for the same code, shipped data,
shipped configs and user files. The code version hashes every module of the package, every
shipped data file and every shipped config and sweep; the config hash adds the content of each
file a design names by path. Reproduced before: the H100 GEMM table's latency_ms doubled, a
resumed sweep reused every design with the old TPOT."""

from __future__ import annotations

import shutil
from pathlib import Path

import decodelab
import decodelab.core.result as R
import decodelab.opcost.attention_decode as attntable
import decodelab.opcost.collectives as collectives
import decodelab.opcost.gemm as optable
import decodelab.opcost.moe as moetable
import pandas as pd
import pytest
from decodelab import paths
from decodelab.api import load_results

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
    pytest.mark.slow,
]
GEMM = "operators/h100_sxm_gemm_trtllm_1.2.0rc5.parquet"  # hardware=h100_sxm's GEMM table
DESIGNS = ["model=llama3_2_1b", "hardware=h100_sxm", "workload.batch_size=1,16"]
# Llama-3.2-1B, batch 1, one H100: TPOT with the shipped GEMM table and with its latency_ms
# doubled (decodelab.evaluate of each table; the 0.900 ms between them is the table's GEMMs)
TPOT_MS, TPOT_DOUBLED_MS = 1.6236, 2.5237


def sweep(tmp: Path, name: str, extra=()):
    from decodelab.config.plan import make_plan
    from decodelab.runs.sweep import run_sweep

    args = [
        f"hydra.sweep.dir={tmp / name}",
        f"tracking.uri=sqlite:///{tmp / 'store' / 'mlflow.db'}",
        f"tracking.artifact_root={tmp / 'art'}",
        *DESIGNS,
        *extra,
    ]
    out = run_sweep(make_plan(None, args), jobs=1, progress=False)
    return out, load_results(out.sweep_dir).sort_values("workload.batch_size")


def double_latency(path: Path) -> None:
    df = pd.read_parquet(path)
    df.assign(latency_ms=df.latency_ms * 2).to_parquet(path)
    for mod in (optable, collectives, attntable, moetable):  # tables are cached per path in a process
        for f in vars(mod).values():
            if callable(getattr(f, "cache_clear", None)):
                f.cache_clear()


@pytest.fixture
def fresh_version(monkeypatch):
    """The real code version, computed afresh (restored after the test)."""
    monkeypatch.setattr(R, "_CODE_VERSION", [""])
    monkeypatch.setattr(R, "_FILE_DIGESTS", {})
    monkeypatch.setattr(R, "_RESOLVED", {})


def test_changed_shipped_table_recomputes_resumed_sweep(tmp_path, monkeypatch, fresh_version):
    data = tmp_path / "data"
    shutil.copytree(paths.DATA_DIR, data, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(paths, "DATA_DIR", data)  # the shipped tables, a copy we may edit
    first, t1 = sweep(tmp_path, "s1")
    assert first.counts()["ok"] == 2 and first.counts()["reused"] == 0
    assert t1.tpot_ms.iloc[0] == pytest.approx(TPOT_MS, abs=1e-3)
    again, _ = sweep(tmp_path, "s2")
    assert again.counts()["reused"] == 2  # same data: reused

    old = R.code_version()
    double_latency(data / GEMM)
    R._CODE_VERSION[0] = ""  # a new process after the data changed
    assert R.code_version() != old and R.code_version().split("+")[0] == old.split("+")[0]
    changed, t3 = sweep(tmp_path, "s3")
    assert changed.counts()["reused"] == 0 and len(changed.evaluated) == 2
    assert (t3.code_version == R.code_version()).all() and not set(t3.config_hash) & set(t1.config_hash)
    assert t3.tpot_ms.iloc[0] == pytest.approx(TPOT_DOUBLED_MS, abs=1e-3)  # the new data's, not 1.62


def test_changed_user_table_recomputes_resumed_sweep(tmp_path, fresh_version):
    table = tmp_path / "my_gemm.parquet"
    shutil.copy(paths.DATA_DIR / GEMM, table)
    mine = [f"hardware.op_tables.gemm={table}"]
    first, t1 = sweep(tmp_path, "s1", mine)
    assert first.counts()["ok"] == 2 and t1.tpot_ms.iloc[0] == pytest.approx(TPOT_MS, abs=1e-3)
    version = R.code_version()
    double_latency(table)  # edited in place: same path, same config
    changed, t2 = sweep(tmp_path, "s2", mine)
    assert R.code_version() == version  # the package did not change; the design's key did
    assert changed.counts()["reused"] == 0 and not set(t2.config_hash) & set(t1.config_hash)
    assert t2.tpot_ms.iloc[0] == pytest.approx(TPOT_DOUBLED_MS, abs=1e-3)
    fresh = decodelab.evaluate("model=llama3_2_1b", "hardware=h100_sxm", "workload.batch_size=1", *mine)
    assert t2.tpot_ms.iloc[0] == pytest.approx(fresh.metrics["tpot_ms"], rel=1e-12)  # what the file gives
    again, t3 = sweep(tmp_path, "s3", mine)
    assert again.counts()["reused"] == 2 and list(t3.config_hash) == list(t2.config_hash)


def test_named_files_are_hashed_by_content(tmp_path, monkeypatch, fresh_version):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0,128,64\n")
    (tmp_path / "t.dat").write_text("x")
    (tmp_path / "my table.CSV").write_text("y")
    design = {
        "workload": {"trace": "trace.csv"},  # relative to the working directory, as the model reads it
        "hardware": {"op_tables": {"gemm": "", "gemm_by_engine": {"vllm": "t.dat"}}},  # a path field
        "mine": ["my table.CSV", 'no "such" file.parquet'],  # any value ending like a table
        "note": {"source": "fitted to nccl.csv (126 rows)", "other": "x" * 300 + ".csv"},
    }
    files = R.named_files(design)
    assert sorted(files) == ["my table.CSV", "t.dat", "trace.csv"]  # no file: nothing
    assert (
        files["t.dat"] == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    )  # sha256 of "x"
    h = R.config_hash(design)
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0,128,64\n")  # same bytes
    assert R.config_hash(design) == h
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0,128,65\n")
    assert R.config_hash(design) != h
    assert R.named_files({"hardware": {"name": "h100_sxm"}}) == {}  # a design naming no file


def test_changed_config_or_sweep_yaml_changes_code_version(tmp_path, monkeypatch, fresh_version):
    conf, sweeps = tmp_path / "conf", tmp_path / "sweeps"
    shutil.copytree(paths.CONF_DIR, conf)
    shutil.copytree(paths.SWEEPS_DIR, sweeps)
    monkeypatch.setattr(paths, "CONF_DIR", conf)
    monkeypatch.setattr(paths, "SWEEPS_DIR", sweeps)
    v0 = R._compute_code_version()
    assert R._compute_code_version() == v0 == R.code_version()  # deterministic, cached
    hw = conf / "hardware" / "h100_sxm.yaml"
    hw.write_text(hw.read_text().replace("gemm: operators/", "gemm: ./operators/", 1))
    v1 = R._compute_code_version()
    assert v1 != v0
    sw = next(iter(sorted(sweeps.glob("*.yaml"))))
    sw.write_text(sw.read_text() + "\n# changed\n")
    assert R._compute_code_version() not in (v0, v1)


def test_checkout_and_wheel_of_same_files_have_same_version(tmp_path):
    """A source checkout (framework/ beside components/, conf/, sweeps/) and an installed wheel
    (all inside decodelab/) of the same files hash alike; the wheel's nested trees count once."""
    files = {"x.py": "a", "core/y.py": "b", "data/t.csv": "1,2", "data/sub/u.parquet": "p"}
    extra = {"components/c.py": "c", "conf/h.yaml": "h: 1", "sweeps/s.yaml": "s: 1"}
    src, whl = tmp_path / "src", tmp_path / "site" / "decodelab"
    for name, text in [*((f"framework/{k}", v) for k, v in files.items()), *extra.items()]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    for name, text in {**files, **extra}.items():
        (whl / name).parent.mkdir(parents=True, exist_ok=True)
        (whl / name).write_text(text)
    (src / "framework" / "core" / "__pycache__").mkdir()
    (src / "framework" / "core" / "__pycache__" / "y.cpython-311.pyc").write_text("compiled")

    def trees(pkg, comps, conf, sweeps):
        return [
            ("", pkg, "*.py"),
            ("components/", comps, "*.py"),
            ("data/", pkg / "data", "*"),
            ("conf/", conf, "*.yaml"),
            ("sweeps/", sweeps, "*.yaml"),
        ]

    checkout = R.tree_digest(trees(src / "framework", src / "components", src / "conf", src / "sweeps"))
    wheel = R.tree_digest(trees(whl, whl / "components", whl / "conf", whl / "sweeps"))
    assert checkout == wheel
    (whl / "data" / "t.csv").write_text("1,3")
    assert R.tree_digest(trees(whl, whl / "components", whl / "conf", whl / "sweeps")) != checkout
