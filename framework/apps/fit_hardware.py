"""Fit a hardware YAML's per-shape operator laws (hardware.op_model: fitted) to operator
microbenchmark CSVs in AIConfigurator's schema (GEMM, context and generation attention,
TensorRT-LLM all-reduce, NCCL; and an engine's top-k / top-p sort path: batch, vocab, latency_ms,
the `op_fit.sampler.sort` law): prints the `op_model` + `op_fit` fragment, each value commented
with the file it was fitted to and the fit error of its class, and the error table; a GEMM file
also becomes the chip's `op_tables.gemm` (GEMMs costed from the table at their own shapes), with
its interpolation error by leave-one-out, a generation attention file its `op_tables.attention_decode`
(decode attention costed from the table at its heads), and an all-reduce file the chip's
`op_tables.all_reduce` (TensorRT-LLM's) or `op_tables.all_reduce_by_engine.<framework>`.

  decodelab fit-hardware gemm.csv context_attention.csv generation_attention.csv
  decodelab fit-hardware my_chip_operators/ --hardware my_chip --out my_chip_fit.yaml

Paste the fragment into conf/hardware/<chip>.yaml. One file per kind (several GEMM files, e.g. two
engines: pass the one to fit); an all-reduce CSV with a `framework` column (vllm, sglang) is that
engine's own kernel (op_fit.all_reduce_by_engine.<framework>), one per framework. docs/model.md,
"Per-shape operator laws"."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import List

from decodelab.apps.common import errors, run_module
from decodelab.config import compose as C
from decodelab.opcost import gemm


def add_arguments(p) -> None:
    p.add_argument(
        "paths", nargs="+", metavar="OPERATOR_DIR_OR_CSV", help="operator CSVs or directories of them"
    )
    p.add_argument(
        "--hardware",
        default="h100_sxm",
        help="hardware config whose peaks (FLOP/s, HBM bandwidth) the efficiencies refer to (default h100_sxm)",
    )
    p.add_argument("--out", help="write the YAML fragment to this file (default: print it)")


def run(a) -> int:
    from rich.console import Console
    from rich.table import Table

    from decodelab.calibration import fit as F
    from decodelab.calibration import operators as O

    try:
        hw = C.compose([f"hardware={a.hardware}"]).hardware
    except C.hydra_errors() as e:
        return errors(f"--hardware={a.hardware}: {str(e).strip().splitlines()[0]}")
    try:
        data = O.load([Path(p) for p in a.paths])
    except O.OperatorCSVError as e:
        return errors(str(e))
    fits = F.fit_all(data, hw)
    if not fits:
        return errors(
            f"no class has {F.MIN_ROWS} rows in the fit range in {', '.join(a.paths)} "
            "(gemm bfloat16/fp8, attention bfloat16/fp8, collectives at 2+ GPUs)"
        )
    command = "decodelab fit-hardware " + " ".join(shlex.quote(p) for p in a.paths)
    if a.hardware != "h100_sxm":
        command += f" --hardware {a.hardware}"
    text = F.to_yaml(fits, a.hardware, command)
    loo = {}
    if "gemm" in data:  # the GEMM file also serves as the chip's table (hardware.op_tables.gemm)
        gemm_file = _file_named(a.paths, data["gemm"][1])
        loo = gemm.leave_one_out(data["gemm"][0])
        errs = "; ".join(f"{dt} n {e['n'][1]:.1f}% / k {e['k'][1]:.1f}%" for dt, e in loo.items())
        text += (
            '# GEMMs at a design\'s own shapes from the table itself (docs/model.md, "Per-shape operator laws");\n'
            f"# interpolation error by leave-one-out (mean |error|, each interior grid n / k from its neighbours): {errs}\n"
            f"op_tables:\n  gemm: {gemm_file}\n"
        )
    text += _other_tables(a.paths, data, header="gemm" not in data)  # gemm: op_tables is open
    if a.out:
        Path(a.out).expanduser().write_text(text)
    else:
        print(text, end="")
    t = Table(title="fit error per operator class (|predicted / measured - 1|, fit rows)")
    for col in ("class", "rows", "MAPE law", "MAPE roofline", "median law", "max law"):
        t.add_column(col, justify="right" if col != "class" else "left", no_wrap=True)
    for name, n, new, old, med, mx in F.table(fits):
        t.add_row(name, str(n), f"{new:.1f}%", f"{old:.1f}%", f"{med:.1f}%", f"{mx:.0f}%")
    Console(stderr=not a.out, width=110).print(t)
    if loo:
        t = Table(title="GEMM table interpolation error (leave-one-out over grid n and k, 1 <= m <= 16384)")
        for col in ("dtype", "points", "n: mean", "n: median", "k: mean", "k: median"):
            t.add_column(col, justify="right" if col != "dtype" else "left", no_wrap=True)
        for dt, e in loo.items():
            t.add_row(
                dt, str(e["n"][0] + e["k"][0]), *(f"{e[x][i]:.1f}%" for x in ("n", "k") for i in (1, 2))
            )
        Console(stderr=not a.out, width=110).print(t)
    if a.out:
        print(f"wrote {a.out}")
    return 0


def _other_tables(paths: List[str], data: dict, header: bool) -> str:
    """The op_tables lines that name the generation attention file (`attention_decode`: decode
    attention from the table at the heads it has) and the all-reduce files as the chip's tables:
    TensorRT-LLM's (`all_reduce`) and each engine's own (`all_reduce_by_engine.<framework>`),
    costed from the table at the GPU counts it has, the law at others (docs/model.md, "Per-shape
    operator laws")."""
    own = {k.split(":", 1)[1]: v[1] for k, v in data.items() if k.startswith("allreduce:")}
    lines = []
    if "generation_attention" in data:
        lines.append(f"  attention_decode: {_file_named(paths, data['generation_attention'][1])}")
    if "allreduce" in data:
        lines.append(f"  all_reduce: {_file_named(paths, data['allreduce'][1])}")
    if own:
        lines.append("  all_reduce_by_engine:")
        lines += [f"    {eng}: {_file_named(paths, name)}" for eng, name in sorted(own.items())]
    if not lines:
        return ""
    head = (
        "# decode attention and all-reduces from their measured tables where they hold the shape\n"
        '# (docs/model.md, "Per-shape operator laws")\n'
    )
    return head + ("op_tables:\n" if header else "") + "\n".join(lines) + "\n"


def _file_named(paths: List[str], name: str) -> str:
    """The absolute path of the operator file `name` among the given files and directories."""
    for p in map(lambda x: Path(x).expanduser(), paths):
        for f in sorted(p.glob("*.csv")) if p.is_dir() else [p]:
            if f.name == name:
                return str(f.resolve())
    return name


def main(argv: List[str]) -> int:
    return run_module("fit-hardware", sys.modules[__name__], argv)
