"""Index layout of the kernel's plain arrays (framework/core/kernel.py): the causes a step's time
is split by (K_*), the operator columns (L_*, LAW_*, PATH_*), the per-call accumulators (A_*) and
overheads (C_*), the machine vector (H_*), the KV-policy caps (P_*) and the step rows (S_*).
`kernel` re-exports every name: callers use `kernel.<NAME>`."""

from __future__ import annotations

CAUSES = ("memory", "compute", "launch_sync", "fill_drain", "host", "collectives", "excess")
K_MEM, K_COMP, K_LAUNCH, K_FILL, K_HOST, K_COLL, K_EXCESS = range(7)

# L_SAMPLED = 1: the op's per-token terms apply to the sampled tokens only (final norm, LM head,
# sampling: engines compute logits only where a token is emitted), not to every token of the step.
# L_FLOPS_CTX / L_ACT_CTX: FLOPs and activation bytes per KV token the step reads (MLA's prefill
# path decompresses the cached latent of every context token).
# L_PATH: which sequences the op runs for: PATH_ALL, PATH_DECODE (decode and verification
# sequences only) or PATH_PREFILL (prefill sequences only): a model may compute attention one way
# when decoding and another when prefilling (MLA: absorbed vs decompressed). An op whose path has
# no sequence in the step costs nothing, and a call none of whose ops runs is not issued.
(
    L_FLOPS_TOK,
    L_ACT_TOK,
    L_KV_READ_CTX,
    L_KV_WRITE_TOK,
    L_ATTN_FLOPS_CTX,
    L_LINK_TOK,
    L_NCOLL,
    L_SAMPLED,
    L_FLOPS_CTX,
    L_ACT_CTX,
    L_PATH,
) = range(11)
PATH_ALL, PATH_DECODE, PATH_PREFILL = 0.0, 1.0, 2.0
# Per-shape law columns (hardware.op_model=fitted; framework/opcost/registry.py fills them, all 0 for
# the roofline law). L_LAW: which law costs the op. An op under a law is alone in its kernel
# call (gpu execution): the call's time is the law's, its t0 replaces the call's sync.
#   LAW_GEMM  t = pnorm_p(A_c m, C_m + A_m m) + t0                         (m = the op's tokens)
#   LAW_ATTN  prefill part: t0 + a_pair pairs + a_tok tokens + a_seq seqs (prefilling sequences)
#             decode part:  d_t0 + pnorm_dp(d_seq seqs, d_ctx kv_tokens)   (decoding sequences)
#   LAW_COLL  the op is one collective: (S < S* ? a_lo : a_hi) + S inv_bw, S = c_bytes m
#   LAW_SKIP  inside a law-costed attention call (RoPE + KV write): costs nothing
# L_C_BYTES > 0 adds the collective law to a LAW_GEMM op too (the LM head's logits all-gather).
(
    L_LAW,
    L_T0,
    L_G_AC,
    L_G_CM,
    L_G_AM,
    L_G_P,
    L_D_T0,
    L_D_SEQ,
    L_D_CTX,
    L_D_P,
    L_C_BYTES,
    L_C_LO,
    L_C_HI,
    L_C_SW,
    L_C_INV_BW,
) = range(11, 26)
L_A_PAIR, L_A_TOK, L_A_SEQ = L_G_AC, L_G_CM, L_G_AM  # LAW_ATTN's prefill part shares the columns
# A LAW_GEMM op with L_G_TAB = 1 is costed from a measured table (hardware.op_tables.gemm,
# opcost/gemm.py) instead of its law: t = its latency beyond t0 at the M_GRID token counts
# (columns L_TAB .. L_TAB + N_MGRID - 1), linear in m between them and along the last segment
# beyond the grid; L_T0 holds the law's t0, or the fastest tabulated call if that is less
# (reported as launch_sync). A LAW_COLL op with L_G_TAB = 1 takes its collective time from the same
# columns (hardware.op_tables.all_reduce), reported as collectives.
L_G_TAB = 26
# A LAW_ATTN op with L_D_TAB = 1 takes its decode part from a measured decode attention table
# (hardware.op_tables.attention_decode, opcost/attention_decode.py): log seconds on B_GRID (sequences) x
# C_GRID (KV tokens per sequence) in columns L_TAB .. (B_GRID-major), log-bilinear, linear in the KV
# read beyond the grid, never below L_D_FLOOR x KV tokens (the KV read at the chip's HBM peak).
L_D_TAB = 27
L_D_FLOOR = 28
# L_W_TAB = 1: an MoE expert op whose weight read depends on the step's tokens (the experts they
# activate; components/models/experts.py weight_read): its weight bytes (op_w, at the design's
# tokens_per_step) scale by the ratio tabulated at the M_GRID token counts in columns L_W_RATIO ..
# (linear between them, constant beyond them), after the M_GRID columns of a GEMM or MoE table the
# op may have (an attention op, whose table fills more columns, has no such ratio).
L_W_TAB = 29
# L_REPLICA = 1: under data-parallel attention in serving, the op runs on every attention group's
# tokens (Op.replica: the FFN and its collectives): its tokens are the step's x hw[H_DP_TOKENS]
L_REPLICA = 30
L_TAB = 31
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
L_W_RATIO = L_TAB + N_MGRID
N_LIN = L_TAB + max(N_MGRID, N_BGRID * N_CGRID)
LAW_NONE, LAW_GEMM, LAW_ATTN, LAW_COLL, LAW_SKIP = 0.0, 1.0, 2.0, 3.0, 4.0

# Per-call accumulators of one step (acc_flops[c, :]): roofline FLOPs, FLOPs weighted by 1 /
# relative efficiency, 1 when an op of the call runs, 1 when a law costs the call, the law's
# time without t0, its t0, its collective time; the call's whole time in the step (A_TIME).
A_FLOPS, A_WORK, A_ACTIVE, A_LAW, A_LAW_T, A_LAW_T0, A_LAW_COLL, A_TIME = range(8)
N_ACC = 8

(
    C_LAUNCH_EACH,
    C_FILL_EACH,
    C_LAUNCH_ONCE,
    C_FILL_ONCE,
    C_OVERLAP_LINK,
    C_SAMPLE_GAP,
    C_FREE_SAMPLES,
    C_LAUNCH_ASYNC,
    C_STAGE,
) = range(9)
N_CALL = 9  # C_STAGE: where the call runs under pipeline parallelism (core/pipeline.py STAGE_*)

# H_ATTN_REL: attention's (query, key) FLOPs run at this fraction of the GEMM efficiency
# (flash-attention kernels reach less of the peak than GEMMs; 1 = the same)
(
    H_PEAK_FLOPS,
    H_BW_EFF_MAX,
    H_BW_HALF,
    H_C_EFF_MAX,
    H_C_HALF,
    H_LINK_BW,
    H_COLL_LAT,
    H_HOST_STEP,
    H_ACT_TIER,
    H_ATTN_REL,
    H_PP,
    H_PP_MB,
    H_PP_LAYERS,
    H_PP_FIRST,
    H_PP_MID,
    H_PP_LAST,
    H_P2P_BYTES_TOK,
    H_P2P_BW,
    H_P2P_LAT,
    H_P2P_AG_TOK,
    H_DP_TOKENS,
) = range(21)
N_HW = 21  # H_PP...: pipeline parallelism, filled and explained by core/parallel.py fill_hw;
# H_DP_TOKENS: the replica's tokens per token of the simulated attention group (1 but in serving
# under data-parallel attention: core/parallel.py dp_token_scale)

# KV-policy caps (0 = none), the plain form every policy reduces to (components/kv_policy/):
P_PROMPT_CAP, P_TOTAL_CAP, P_READ_CAP = range(3)
N_KV_CAPS = 3

S_QTOK, S_CTX, S_SEQS, S_OUT, S_PREFILL = range(5)
N_STEP = 5

__all__ = [n for n in dir() if n.isupper() or (n[:1].isupper() and "_" in n)]  # the constants
