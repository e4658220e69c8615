"""KV-cache policies, selected by `kv_policy.name` (interface: components/kv_policy/full.py).

A policy module defines the interface functions in which it differs from the full cache; the
others fall back to full.py's (no slot, every stored token read, no extra bytes or selection
cost), so a new policy starts from `check`, `cached_tokens` and `kernel_params`."""

from types import ModuleType

from decodelab.components.kv_policy import full, h2o, pyramidkv, quest, snapkv, snapstream, streaming_llm

INTERFACE = (
    "check",
    "cached_tokens",
    "kernel_params",
    "slot_layout",
    "slot_capacity",
    "read_tokens",
    "read_coeffs",
    "decode_overhead_bytes",
    "prefill_overhead",
)


class Policy:
    """A policy module with full.py's defaults for the interface functions it leaves out."""

    def __init__(self, module: ModuleType):
        self.module = module
        self.name = module.__name__.rsplit(".", 1)[-1]
        for fn in INTERFACE:
            setattr(self, fn, getattr(module, fn, getattr(full, fn)))

    def __getattr__(self, attr):  # the module's own helpers (snapstream.capacity, ...)
        return getattr(self.module, attr)


KV_POLICIES = {
    m.__name__.rsplit(".", 1)[-1]: Policy(m)
    for m in (full, streaming_llm, snapkv, h2o, pyramidkv, quest, snapstream)
}
