"""Layout of the kernel's plain arrays (framework/core/kernel.py), each declared once as a `Layout`:
the causes a step's time is split by (`Cause`), the operator columns (`Lin`, with the codes `Law`
and `OpPath`), the per-call accumulators (`Acc`) and overheads (`Call`), the machine vector (`Hw`),
the KV-policy caps (`Cap`) and the step rows (`Step`); and the token and attention grids of the
tabulated columns. The serving scheduler's arrays are laid out the same way (modes/serving/layout.py).
"""

from __future__ import annotations

import types
from typing import Iterator, Mapping, Tuple, Union

import numpy as np


class Layout(types.ModuleType):
    """Named positions along one axis of a kernel array (or the codes a column holds), numbered in
    the order they are declared: after `Hw = Layout("Hw", "PEAK_FLOPS", "BW_EFF_MAX", ...)`,
    Hw.PEAK_FLOPS == 0, Hw.BW_EFF_MAX == 1, ..., and Hw.size (= len(Hw)) positions in all. An
    entry ("NAME", n) takes n consecutive positions, NAME the first of them. Adding a field is
    one line.

    It is a module object because Numba reads a global module's attributes inside a jitted function
    as compile-time integer constants, exactly as it does a module's global ints (it cannot read a
    class's attributes, and an IntEnum member is no plain int there): `hw[Hw.PEAK_FLOPS]` compiles
    to the same code as `hw[0]`. Jitted code writes `Hw.size`; Python code may write len(Hw).
    Producers write a whole vector by name (`vector`), so a field nobody fills is an error."""

    def __init__(self, name: str, *fields: Union[str, Tuple[str, int]]):
        super().__init__(name)
        names, at = [], 0
        for f in fields:
            key, width = (f, 1) if isinstance(f, str) else f
            if not key.isupper() or key in names or width < 1:
                raise ValueError(f"{name}: field {key!r} repeated, empty or not UPPER_CASE")
            setattr(self, key, at)
            names.append(key)
            at += width
        self.names: Tuple[str, ...] = tuple(names)  # the fields, in order (aliases not included)
        self.size: int = at
        starts = [getattr(self, n) for n in names]
        # (lower-case name, first position, end) of every field: what `vector` fills
        self.slots: Tuple[Tuple[str, int, int], ...] = tuple(
            zip((n.lower() for n in names), starts, starts[1:] + [at])
        )

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Tuple[str, int]]:
        """(name, position) of every field in order."""
        return ((n, getattr(self, n)) for n in self.names)

    def __repr__(self) -> str:
        return f"Layout {self.__name__}(" + ", ".join(f"{n}={i}" for n, i in self) + f"; size {self.size})"

    def alias(self, **positions: int) -> None:
        """Second names for positions already declared (a column two laws share, a part of a block)."""
        for key, at in positions.items():
            if hasattr(self, key) or not 0 <= at < self.size:
                raise ValueError(f"{self.__name__}: alias {key}={at} taken or outside the layout")
            setattr(self, key, at)

    def vector(self, values: Mapping[str, float]) -> np.ndarray:
        """A float vector with every field taken from `values` by its lower-case name (keys that are
        no field are ignored); a field `values` lacks is a ValueError naming it. A block field
        takes a sequence of its width."""
        out = np.zeros(self.size)
        try:
            for key, at, end in self.slots:
                out[at:end] = values[key]
        except KeyError:
            missing = [key for key, _, _ in self.slots if key not in values]
            if not missing:  # the mapping's own KeyError, not an absent field
                raise
            raise ValueError(f"{self.__name__}: no value for {', '.join(missing)}") from None
        return out


# The causes a step's time is split by (out[r, Cause.*]); CAUSES are their names in results.
Cause = Layout("Cause", "MEMORY", "COMPUTE", "LAUNCH_SYNC", "FILL_DRAIN", "HOST", "COLLECTIVES", "EXCESS")
CAUSES = tuple(n.lower() for n in Cause.names)

# The grids of the tabulated columns (Lin.TAB ...).
B_GRID = tuple(float(2**i) for i in range(12))  # 1 .. 2048 sequences
C_GRID = tuple(float(2**i) for i in range(1, 18))  # 2 .. 131072 KV tokens per sequence
N_BGRID, N_CGRID = len(B_GRID), len(C_GRID)
M_GRID = (
    tuple(float(m) for m in range(1, 17))
    + (32.0, 48.0, 64.0, 80.0, 96.0, 112.0, 128.0, 160.0, 192.0, 224.0, 256.0)
    + tuple(float(m) for m in range(512, 4353, 256))
    + (8192.0, 16384.0)
)
N_MGRID = len(M_GRID)

# The operator columns op_lin[o, Lin.*]. core/build.py fills the roofline terms (FLOPS_TOK .. PATH,
# W_TAB, W_RATIO, REPLICA); framework/opcost/registry.py the law columns LAW .. TAB (all 0 for the
# roofline law).
Lin = Layout(
    "Lin",
    "FLOPS_TOK",  # FLOPs per token of the op's path
    "ACT_TOK",  # activation bytes per token
    "KV_READ_CTX",  # KV bytes read per KV token the step reads
    "KV_WRITE_TOK",  # KV bytes written per token
    "ATTN_FLOPS_CTX",  # attention FLOPs per causal (query, key) pair
    "LINK_TOK",  # collective bytes per token (the roofline's link time)
    "NCOLL",  # collectives per invocation (each costs hw[Hw.COLL_LAT])
    # SAMPLED = 1: the op's per-token terms apply to the sampled tokens only (final norm, LM head,
    # sampling: engines compute logits only where a token is emitted), not to every token of the step
    "SAMPLED",
    # FLOPs and activation bytes per KV token the step reads (MLA's prefill path decompresses the
    # cached latent of every context token)
    "FLOPS_CTX",
    "ACT_CTX",
    # which sequences the op runs for (OpPath below): a model may compute attention one way when
    # decoding and another when prefilling (MLA: absorbed vs decompressed). An op whose path has no
    # sequence in the step costs nothing, and a call none of whose ops runs is not issued.
    "PATH",
    # Per-shape law columns (hardware.op_model=fitted). LAW: which law costs the op (Law below). An
    # op under a law is alone in its kernel call (gpu execution): the call's time is the law's, its
    # t0 replaces the call's sync.
    #   Law.GEMM  t = pnorm_p(A_c m, C_m + A_m m) + t0                         (m = the op's tokens)
    #   Law.ATTN  prefill part: t0 + a_pair pairs + a_tok tokens + a_seq seqs (prefilling sequences)
    #             decode part:  d_t0 + pnorm_dp(d_seq seqs, d_ctx kv_tokens)   (decoding sequences)
    #   Law.COLL  the op is one collective: (S < S* ? a_lo : a_hi) + S inv_bw, S = c_bytes m
    #   Law.SKIP  inside a law-costed attention call (RoPE + KV write): costs nothing
    # C_BYTES > 0 adds the collective law to a Law.GEMM op too (the LM head's logits all-gather).
    "LAW",
    "T0",
    "G_AC",  # = A_PAIR: Law.ATTN's prefill part shares the GEMM columns (aliases below)
    "G_CM",  # = A_TOK
    "G_AM",  # = A_SEQ
    "G_P",
    "D_T0",
    "D_SEQ",
    "D_CTX",
    "D_P",
    "C_BYTES",
    "C_LO",
    "C_HI",
    "C_SW",
    "C_INV_BW",
    # A Law.GEMM op with G_TAB = 1 is costed from a measured table (hardware.op_tables.gemm,
    # opcost/gemm.py) instead of its law: t = its latency beyond t0 at the M_GRID token counts
    # (columns TAB .. TAB + N_MGRID - 1), linear in m between them and along the last segment
    # beyond the grid; T0 holds the law's t0, or the fastest tabulated call if that is less
    # (reported as launch_sync). A Law.COLL op with G_TAB = 1 takes its collective time from the
    # same columns (hardware.op_tables.all_reduce), reported as collectives.
    "G_TAB",
    # A Law.ATTN op with D_TAB = 1 takes its decode part from a measured decode attention table
    # (hardware.op_tables.attention_decode, opcost/attention_decode.py): log seconds on B_GRID
    # (sequences) x C_GRID (KV tokens per sequence) in columns TAB .. (B_GRID-major),
    # log-bilinear, linear in the KV read beyond the grid, never below D_FLOOR x KV tokens (the KV
    # read at the chip's HBM peak).
    "D_TAB",
    "D_FLOOR",
    # W_TAB = 1: an MoE expert op whose weight read depends on the step's tokens (the experts they
    # activate; components/models/experts.py weight_read): its weight bytes (op_w, at the design's
    # tokens_per_step) scale by the ratio tabulated at the M_GRID token counts in columns W_RATIO ..
    # (linear between them, constant beyond them), after the M_GRID columns of a GEMM or MoE table
    # the op may have (an attention op, whose table fills more columns, has no such ratio).
    "W_TAB",
    # REPLICA = 1: under data-parallel attention in serving, the op runs on every attention group's
    # tokens (Op.replica: the FFN and its collectives): its tokens are the step's x hw[Hw.DP_TOKENS]
    "REPLICA",
    ("TAB", max(N_MGRID, N_BGRID * N_CGRID)),  # the tabulated columns (above)
)
Lin.alias(A_PAIR=Lin.G_AC, A_TOK=Lin.G_CM, A_SEQ=Lin.G_AM, W_RATIO=Lin.TAB + N_MGRID)
Law = Layout("Law", "NONE", "GEMM", "ATTN", "COLL", "SKIP")  # the codes of op_lin[o, Lin.LAW]
# the codes of op_lin[o, Lin.PATH]: the op runs for every sequence of a step (ALL), for decode and
# verification sequences only (DECODE) or for prefill sequences only (PREFILL)
OpPath = Layout("OpPath", "ALL", "DECODE", "PREFILL")

# Per-call accumulators of one step (acc_flops[c, Acc.*]).
Acc = Layout(
    "Acc",
    "FLOPS",  # roofline FLOPs
    "WORK",  # FLOPs weighted by 1 / relative efficiency
    "ACTIVE",  # 1 when an op of the call runs
    "LAW",  # 1 when a law costs the call
    "LAW_T",  # the law's time without t0
    "LAW_T0",  # its t0
    "LAW_COLL",  # its collective time
    "TIME",  # the call's whole time in the step
    "CBUSY",  # its busy time when compute-bound (invocations x achieved), else 0: sustained clocks
)

# The per-call link accumulators (acc_link[c, Link.*]): bytes over the link, collectives issued.
Link = Layout("Link", "BYTES", "NCOLL")

# Per-call overheads and flags (call_cost[c, Call.*]; the execution models' call dicts by these
# names in lower case, components/execution/): core/kernel.py's docstring explains them.
Call = Layout(
    "Call",
    "LAUNCH_EACH",
    "FILL_EACH",
    "LAUNCH_ONCE",
    "FILL_ONCE",
    "OVERLAP_LINK",
    "SAMPLE_GAP",
    "FREE_SAMPLES",
    "LAUNCH_ASYNC",
    "STAGE",  # where the call runs under pipeline parallelism (core/pipeline.py Stage)
)

# The machine vector hw[Hw.*] (core/build.py machine_vector).
Hw = Layout(
    "Hw",
    "PEAK_FLOPS",  # FLOP/s
    "BW_EFF_MAX",  # achieved fraction of a tier's bandwidth, reached as bytes >> BW_HALF
    "BW_HALF",  # bytes a call moves at half of BW_EFF_MAX
    "C_EFF_MAX",  # achieved fraction of PEAK_FLOPS, reached as FLOPs >> C_HALF
    "C_HALF",  # FLOPs of a call at half of C_EFF_MAX
    "LINK_BW",  # bytes/s of the tensor-parallel link
    "COLL_LAT",  # seconds per collective
    "HOST_STEP",  # the host's seconds per step
    "ACT_TIER",  # the memory tier activations live in (its index in tier_bw)
    # attention's (query, key) FLOPs run at this fraction of the GEMM efficiency (flash-attention
    # kernels reach less of the peak than GEMMs; 1 = the same)
    "ATTN_REL",
    # pipeline parallelism, filled and explained by core/parallel.py pipeline_fields
    "PP",
    "PP_MB",
    "PP_LAYERS",
    "PP_FIRST",
    "PP_MID",
    "PP_LAST",
    "P2P_BYTES_TOK",
    "P2P_BW",
    "P2P_LAT",
    "P2P_AG_TOK",
    # the replica's tokens per token of the simulated attention group (1 but in serving under
    # data-parallel attention: core/parallel.py dp_token_scale)
    "DP_TOKENS",
    # sustained clocks (core/kernel.py): compute-bound time of a step beyond SUST_AFTER seconds
    # takes SUST_SLOW longer (1 / hardware.sustained_compute_ratio - 1; 0 = burst clocks throughout)
    "SUST_SLOW",
    "SUST_AFTER",
)

# KV-policy caps (0 = none), the plain form every policy reduces to: its kernel_params by these
# names in lower case (components/kv_policy/).
Cap = Layout("Cap", "PROMPT_CAP", "TOTAL_CAP", "READ_CAP")

# The rows the kernel evaluates (steps[r, Step.*]): query tokens per sequence, KV tokens the step
# attends per sequence, sequences, sampled tokens per sequence, prefill flag.
Step = Layout("Step", "QTOK", "CTX", "SEQS", "OUT", "PREFILL")
