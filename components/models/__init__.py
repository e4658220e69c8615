"""Model architectures, selected by `model.arch`."""
from components.models import dense

ARCHITECTURES = {"dense": dense}
