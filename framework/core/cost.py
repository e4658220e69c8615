"""Normalised units of a design: tokens/s per chip, energy per token, cost per million tokens
(docs/model.md, "Cost and energy"). Pure arithmetic on times the kernel already split by cause.

Power model (one line per chip, no fitted parameter): a chip draws `idle_w` whenever it is
powered and `tdp_w` while it runs a kernel body, so over a span of `seconds` of which
`busy_seconds` run kernel bodies its mean power is

    P = idle_w + (tdp_w - idle_w) * u,      u = busy_seconds / seconds

Busy causes (CAUSES) are those of a kernel body: `memory` and `compute` (the roofline
time) and `excess` (the same kernel below its peak efficiency). Idle causes are the waits:
`launch_sync`, `fill_drain`, `host`, `collectives` (waiting on a peer or the link), and in
serving runs the gaps between steps when no request is in flight. TDP during a body is an upper
bound for memory-bound decode (streaming HBM with idle tensor units draws less than TDP), so the
energy is an upper bound at the modelled busy share; only the accelerators are counted (no host
CPU, DRAM, network or cooling).

Every chip of the system (`hardware.n_chips`) is counted and paid for; `replicas` copies of the
simulated replica each emit `tokens` tokens in `seconds`."""

from __future__ import annotations

from typing import Dict, Sequence

from decodelab.kernel_layout import CAUSES

BUSY_CAUSES = ("memory", "compute", "excess")
_BUSY = [CAUSES.index(c) for c in BUSY_CAUSES]


def busy_seconds(cause_seconds: Sequence[float]) -> float:
    """Seconds of kernel bodies among seconds split by CAUSES."""
    return float(sum(cause_seconds[k] for k in _BUSY))


def chip_power_w(hw, busy_share: float) -> float:
    """Mean power of one chip busy a share `busy_share` of the time."""
    return hw.idle_w + (hw.tdp_w - hw.idle_w) * busy_share


def cost_metrics(hw, seconds: float, busy: float, tokens: float, replicas: float) -> Dict[str, float]:
    """tok_s_per_chip always; chip_busy_pct, chip_power_w and energy_j_per_token when the chip's
    power is known (hardware.tdp_w > 0); cost_per_mtok when a price is given
    (hardware.price_per_chip_hour > 0, in its currency)."""
    chip_s = hw.n_chips * seconds  # chip-seconds of the whole system
    sys_tokens = tokens * replicas
    out = {"tok_s_per_chip": sys_tokens / chip_s}
    if hw.tdp_w > 0:
        u = busy / seconds
        p = chip_power_w(hw, u)
        out["chip_busy_pct"] = 100.0 * u
        out["chip_power_w"] = p
        out["energy_j_per_token"] = p * chip_s / sys_tokens
    if hw.price_per_chip_hour > 0:
        out["cost_per_mtok"] = hw.price_per_chip_hour * chip_s / 3600.0 / sys_tokens * 1e6
    return out
