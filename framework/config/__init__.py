"""decodelab.config: the only code that knows Hydra. Schema registration, composing configs
(compose), sweep files, sweep plans whose jobs are composed once per choice of components
(plan), search spaces (space)."""
