"""HBM-resident expert cache with least-recently-used eviction (Composition of Experts,
components/coe.py). It holds expert ids only: the time of a miss (copying the expert's weights
into HBM) is the caller's business."""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, List, Optional


class ExpertCache:
    """`capacity` expert slots in HBM. `access(e)` is a hit when e is resident (it becomes the
    most recently used); a miss copies e in, evicting the least recently used expert when the
    slots are full. `resident` pre-loads experts (first = least recently used) without counting
    them as misses: the placement a system starts from."""

    def __init__(self, capacity: int, resident: Iterable[int] = ()):
        if capacity < 1:
            raise ValueError(f"expert cache capacity={capacity} must be >= 1")
        self.capacity = int(capacity)
        self._slots: "OrderedDict[int, None]" = OrderedDict()
        self.hits = self.misses = self.evictions = 0
        self.last_evicted: Optional[int] = None
        for e in resident:
            self._insert(int(e))
        self.evictions = 0  # pre-loading is placement, not eviction

    def _insert(self, expert: int) -> None:
        self.last_evicted = None
        if len(self._slots) >= self.capacity:
            self.last_evicted, _ = self._slots.popitem(last=False)
            self.evictions += 1
        self._slots[expert] = None

    def access(self, expert: int) -> bool:
        """Use `expert`; True on a hit, False on a miss (the caller pays one switch)."""
        expert = int(expert)
        if expert in self._slots:
            self._slots.move_to_end(expert)
            self.hits += 1
            self.last_evicted = None
            return True
        self.misses += 1
        self._insert(expert)
        return False

    def resident(self) -> List[int]:
        """Resident experts, least recently used first."""
        return list(self._slots)

    def __contains__(self, expert: int) -> bool:
        return int(expert) in self._slots

    def __len__(self) -> int:
        return len(self._slots)
