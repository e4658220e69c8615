"""KV-cache policies, selected by `kv_policy.name` (interface: components/kv_policy/full.py)."""
from components.kv_policy import full, h2o, pyramidkv, quest, snapkv, snapstream, streaming_llm

KV_POLICIES = {"full": full, "streaming_llm": streaming_llm, "snapkv": snapkv, "h2o": h2o,
               "pyramidkv": pyramidkv, "quest": quest, "snapstream": snapstream}
