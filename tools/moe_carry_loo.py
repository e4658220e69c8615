"""Leave-one-out check of the MoE carry (decodelab.opcost.moe_blocks.near_row) over the shipped MoE tables.

Each measured block (dtype, hidden, expert FFN, top-k, experts, moe_tp, moe_ep) of each table under
framework/data/operators/*_moe_*.parquet is predicted from its nearest other block of the same table and dtype
(moe_blocks._distance), at the kernel's M_GRID token counts from its first measured count to min(its last, 4096);
printed: median and mean |predicted / measured - 1| per table and over all, for two carries:
  scaled   the source curve x ideal(wanted) / ideal(source) at every count (near_row before 2026-11-29)
  floor    the source's time beyond its ideal time at its first count kept as a fixed part, the rest scaled
           (near_row now)
Chip peaks from conf/hardware/<chip>.yaml. Run from the repository root: python tools/moe_carry_loo.py"""

import glob

import numpy as np
import yaml

from decodelab.kernel_layout import M_GRID
from decodelab.opcost import moe_blocks as mb

GRID = np.asarray(M_GRID, float)
NAME = {v: k for k, v in mb.DTYPES.items()}  # table dtype -> a decodelab dtype of it


def peaks(path: str):
    """(HBM bytes/s, BF16 FLOP/s, FP8 FLOP/s) of the chip a table was measured on."""
    hw = yaml.safe_load(open(f"conf/hardware/{path.split('/')[-1].split('_moe_')[0]}.yaml"))
    return (
        hw["memory"]["hbm"]["bandwidth_gb_s"] * 1e9,
        hw["peak_tflops_bf16"] * 1e12,
        (hw.get("peak_tflops_fp8") or 0) * 1e12,
    )


def carries(source: np.ndarray, have: np.ndarray, want: np.ndarray) -> dict:
    fixed = max(float(source[0] - have[0]), 0.0)
    return {"scaled": source * want / have, "floor": fixed + (source - fixed) * want / have}


def table_errors(path: str) -> dict:
    """{carry: |error| % at every compared count} of one table."""
    bw, bf16, fp8 = peaks(path)
    cur = mb.curves(path, "")
    keys = [k for k, c in cur.items() if len(c[0]) >= mb.MIN_POINTS]
    out = {"scaled": [], "floor": []}
    for k in keys:
        others = [j for j in keys if j[0] == k[0] and j != k]
        if not others:
            continue
        src = min(others, key=lambda j: mb._distance(k, j))
        peak = fp8 if k[0] in ("fp8", "fp8_block") and fp8 else bf16
        meas = mb.block_row(path, NAME[k[0]], k[1:], "")
        source = mb.block_row(path, NAME[k[0]], src[1:], "")
        lo, hi = cur[k][0][0], min(cur[k][0][-1], 4096)
        at = (GRID >= lo) & (GRID <= hi)
        have, want = mb.ideal(k[0], src[1:], bw, peak), mb.ideal(k[0], k[1:], bw, peak)
        for name, pred in carries(source, have, want).items():
            out[name].append(np.abs(pred[at] / meas[at] - 1) * 100)
    return {name: np.concatenate(e) if e else np.zeros(0) for name, e in out.items()}


def main() -> None:
    every = {"scaled": [], "floor": []}
    for path in sorted(glob.glob("framework/data/operators/*_moe_*.parquet")):
        errs = table_errors(path)
        cells = " | ".join(f"{n} {np.median(e):.1f}% / {np.mean(e):.1f}%" for n, e in errs.items() if len(e))
        print(f"{path.split('/')[-1]}: median / mean {cells}")
        for n, e in errs.items():
            every[n].append(e)
    for n, e in every.items():
        e = np.concatenate(e)
        print(f"all tables, {n}: median {np.median(e):.1f}%, mean {np.mean(e):.1f}% ({len(e)} counts)")


if __name__ == "__main__":
    main()
