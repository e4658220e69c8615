"""Model architectures, selected by `model.arch`."""

from decodelab.components.models import dense, hybrid, mla, moe

# arch=csa (compressed attention, DeepSeek-V4: csa.py) shares moe's interface: the builder (layers.py)
# dispatches on model.compress_ratios
ARCHITECTURES = {"dense": dense, "moe": moe, "mla": mla, "hybrid": hybrid, "csa": moe}
