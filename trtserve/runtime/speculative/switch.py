"""Whether a step speculates: a fixed batch-size limit, or (by default) whichever has been faster.

Speculation pays while a step is bound by reading the weights; as the batch grows, or where proposals
are seldom kept, verification costs more than it saves, and where that happens depends on the device,
the model and the workload. With no `max_batch_size` set, the switch measures it: for each running-batch
size it keeps the output tokens per second of decode steps with and without proposals, and a step
speculates when that has been the faster. The other way is re-tried every PROBE_EVERY steps, so the
choice follows the workload, and throughput moves smoothly as the batch crosses where they meet.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY = 16  # steps at one batch size between tries of the way that has been slower
ALPHA = 0.25  # weight of a new step in the moving averages


@dataclass
class _Rates:
    plain: float | None = None  # output tokens per second of decode steps with no proposals
    spec: float | None = None  # and of those that verified proposals
    decisions: int = 0


class SpeculationSwitch:
    def __init__(self, max_batch_size: int, adaptive: bool):
        """max_batch_size: no step above it speculates. adaptive: below it, choose by measured rates."""
        self.max_batch_size = max_batch_size
        self.adaptive = adaptive
        self._rates: dict[int, _Rates] = {}

    def decide(self, batch_size: int) -> bool:
        """Whether the next step, running `batch_size` sequences, may speculate."""
        if batch_size > self.max_batch_size:
            return False
        if not self.adaptive:
            return True
        r = self._rates.setdefault(batch_size, _Rates())
        r.decisions += 1
        if r.spec is None or r.plain is None:  # not measured yet: speculate first, then run plainly once
            return r.spec is None
        faster = r.spec > r.plain
        return faster != (r.decisions % PROBE_EVERY == 0)

    def observe(self, batch_size: int, speculated: bool, tokens: int, seconds: float) -> None:
        """A decode-only step ran: `tokens` emitted in `seconds`, with proposals verified or not."""
        if not self.adaptive or batch_size > self.max_batch_size or seconds <= 0:
            return
        r = self._rates.setdefault(batch_size, _Rates())
        rate = tokens / seconds
        old = r.spec if speculated else r.plain
        new = rate if old is None else old + ALPHA * (rate - old)
        if speculated:
            r.spec = new
        else:
            r.plain = new

    def rates(self, batch_size: int) -> tuple[float | None, float | None]:
        """(plain, speculating) output tokens per second measured at this batch size."""
        r = self._rates.get(batch_size, _Rates())
        return r.plain, r.spec
