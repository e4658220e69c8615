"""When the pure-Python reference scheduler (framework/modes/serving/reference.py) reads new
requests and lets them into a step: SGLang's polling interval, TensorRT-LLM's attention-DP balance
and its batch waiting, the mirror of the kernel's recv.py."""

from __future__ import annotations

from typing import List


class Recv:
    """When the scheduler reads new requests (recv.py, SGLang's SchedulerRecvSkipper): the summed
    step weights since the last poll reach `interval`, or no step ran since the last round; and
    under TensorRT-LLM's attention-DP balance (`release` > 1) once `release` steps have run since
    the last release, or when nothing runs."""

    def __init__(self, interval: float, release: float = 1.0):
        self.interval, self.count, self.weight = interval, 0.0, 0.0
        self.release, self.steps = release, 0.0

    def released(self, running: int) -> bool:
        if self.release <= 1 or running == 0 or self.steps >= self.release:
            self.steps = 0.0
            return True
        return False

    def poll(self) -> bool:
        if self.interval <= 1:
            return True
        w, self.weight = self.weight, 0.0
        self.count += w
        if w == 0 or self.count >= self.interval:
            self.count = 0.0
            return True
        return False

    def stepped(self, prefill_work: bool) -> None:
        self.weight = 1000.0 if prefill_work else 1.0
        self.steps += 1.0


class BatchWait:
    """TensorRT-LLM's batch waiting (recv.py batch_held): a step with prompts next to decoding
    sequences leaves the prompts out until `iters` such steps have been held or its tokens (whole
    prompts, decode tokens) reach `tokens`; either at 0: never."""

    def __init__(self, iters: float, tokens: float):
        self.iters, self.tokens, self.waited = iters, tokens, 0.0

    @classmethod
    def of(cls, eng: dict) -> "BatchWait":
        """The engine_dict's batch waiting (wait_iters, wait_tokens; 0 where absent)."""
        return cls(eng.get("wait_iters", 0.0), eng.get("wait_tokens", 0.0))

    def held(self, step: List[tuple]) -> bool:
        dec = [q for _, q, d in step if d]
        pre = [r.target for r, _, d in step if not d]
        if not dec or not pre or self.iters <= 0 or self.tokens <= 0:
            return False
        if self.waited >= self.iters or sum(dec) + sum(pre) >= self.tokens:
            self.waited = 0.0
            return False
        self.waited += 1.0
        return True

    def take(self, step: List[tuple]) -> List[tuple]:
        """The step as it runs: without its prompts (still running, prefilled later) when held."""
        return [e for e in step if e[2]] if self.held(step) else step
