"""decodelab.modes: run modes on a config node (static decode, speculative decoding, batch
fill, serving with continuous batching, Composition of Experts) and the one dispatcher,
`dispatch.evaluate`. Modes call downward only (core, components); no Hydra, MLflow or files."""
