"""decodelab components: models, hardware memory placement, KV policies, execution models.
Components take plain config objects (attribute access) and return plain Python/numpy data;
they know nothing of Hydra or MLflow."""
