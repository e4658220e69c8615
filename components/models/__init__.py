"""Model architectures, selected by `model.arch`."""

from decodelab.components.models import dense, hybrid, mla, moe

ARCHITECTURES = {"dense": dense, "moe": moe, "mla": mla, "hybrid": hybrid}
