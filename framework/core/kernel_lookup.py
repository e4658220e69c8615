"""The kernel's per-op lookups and size laws (framework/core/kernel.py uses them in every step):
the achieved fraction of a peak at an operation's size, the p-norm overlap of two times, and the
tabulated op rows the design builder writes into op_lin (opcost/gemm.py, opcost/attention_decode.py,
opcost/moe.py fill them): a GEMM's time beyond t0 on the kernel's token grid, an MoE op's weight
read ratio on the same grid, a decode attention call's time on the (sequences, KV tokens) grid."""

from __future__ import annotations

import numpy as np
from numba import njit

from decodelab.kernel_layout import (
    B_GRID,
    C_GRID,
    Lin,
    M_GRID,
    N_BGRID,
    N_CGRID,
    N_MGRID,
)


@njit(cache=True)
def _eff(x, eff_max, half):
    """Achieved fraction of peak for an operation of size x: eff_max * x / (x + half)."""
    if half <= 0.0:
        return eff_max
    return eff_max * x / (x + half)


@njit(cache=True)
def _pnorm(a, b, p):
    """(a^p + b^p)^(1/p) without overflow."""
    hi = max(a, b)
    if hi <= 0.0:
        return 0.0
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


_M_GRID = np.array(M_GRID)


@njit(cache=True)
def _table(op_lin, o, m, col=Lin.TAB):
    """Op o's tabulated GEMM time beyond t0 at m tokens (linear between the M_GRID points and
    along the last segment beyond them), or another M_GRID row of its from column `col`."""
    j = 0
    while j < N_MGRID - 2 and m > _M_GRID[j + 1]:
        j += 1
    a, b = op_lin[o, col + j], op_lin[o, col + j + 1]
    return a + (m - _M_GRID[j]) * (b - a) / (_M_GRID[j + 1] - _M_GRID[j])


@njit(cache=True)
def _weight_ratio(op_lin, o, m):
    """Op o's weight read at m tokens over that at the design's tokens_per_step (Lin.W_TAB: linear
    between the M_GRID points, constant beyond them)."""
    return _table(op_lin, o, min(max(m, _M_GRID[0]), _M_GRID[N_MGRID - 1]), Lin.W_RATIO)


@njit(cache=True)
def _attn_table(op_lin, o, seqs, kv):
    """Op o's tabulated decode attention time (whole call) for `seqs` sequences reading `kv` KV
    tokens: log-bilinear on the B_GRID x C_GRID powers of two, linear in the KV read beyond the
    grid, never below Lin.D_FLOOR x kv (opcost/attention_decode.py table_time is its twin)."""
    s = max(seqs, 1.0)
    c = max(kv / s, 1.0)
    sc = min(max(s, B_GRID[0]), B_GRID[N_BGRID - 1])
    cc = min(max(c, C_GRID[0]), C_GRID[N_CGRID - 1])
    x = np.log2(sc / B_GRID[0])
    y = np.log2(cc / C_GRID[0])
    i = min(int(x), N_BGRID - 2)
    j = min(int(y), N_CGRID - 2)
    fx = x - i
    fy = y - j
    b0 = Lin.TAB + i * N_CGRID + j
    b1 = b0 + N_CGRID
    v = (1 - fx) * ((1 - fy) * op_lin[o, b0] + fy * op_lin[o, b0 + 1]) + fx * (
        (1 - fy) * op_lin[o, b1] + fy * op_lin[o, b1 + 1]
    )
    t = np.exp(v) * max(1.0, (s * c) / (sc * cc))
    return max(t, op_lin[o, Lin.D_FLOOR] * kv)
