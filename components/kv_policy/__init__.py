"""KV-cache policies, selected by `kv_policy.name`."""
from components.kv_policy import full

KV_POLICIES = {"full": full}
