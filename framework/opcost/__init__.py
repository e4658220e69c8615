"""Operator costs (hardware.op_model=fitted): one module per operator family (gemm,
attention_prefill, attention_decode, mla, moe, collectives, sampler, elementwise), each owning its
fitted law, its measured-table reader, the kernel columns it fills, its pure-Python reference
timing, its checks and its note, behind one seam (`registry`: README.md). Plain values in
(a hardware node, an op, `base.Ctx`), the kernel's law columns out: no config loading (no
decodelab.config, OmegaConf or Hydra), and the kernels (decodelab.core.kernel...) never import it."""
