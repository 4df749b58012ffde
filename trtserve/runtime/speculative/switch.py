"""Whether a step speculates: a fixed batch-size limit, or (by default) whether it is expected to pay.

Speculation pays while the tokens its proposals add outweigh what verifying them costs. The cost
depends on the device and the batch: on a CPU a step in which any row verifies proposals runs op by op
instead of as the one-call C decode step, which at four sequences costs several plain steps. So with no
`max_batch_size` set the switch measures, for each running-batch size, how long a decode step takes
with proposals and without (moving averages), and speculates when the running sequences' expected
accepted tokens (each from its own recent verifications) buy more than that difference:

    (batch + expected accepted) / t_spec  >  batch / t_plain

Each way is timed once before the rule applies, and the way not taken is re-timed every PROBE_EVERY
steps, so the costs follow the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY = 16  # steps at one batch size between timings of the way not taken
ALPHA = 0.25  # weight of a new step in the moving averages


@dataclass
class _Costs:
    plain: float | None = None  # seconds of a decode step with no proposals
    spec: float | None = None  # and of one that verified proposals
    decisions: int = 0


class SpeculationSwitch:
    def __init__(self, max_batch_size: int, adaptive: bool):
        """max_batch_size: no step above it speculates. adaptive: at or below it, decide by expected gain."""
        self.max_batch_size = max_batch_size
        self.adaptive = adaptive
        self._costs: dict[int, _Costs] = {}

    def decide(self, batch_size: int, expected_accepted: float) -> bool:
        """Whether the next step, running `batch_size` sequences whose proposals are expected to add
        `expected_accepted` tokens in all, may speculate."""
        if batch_size > self.max_batch_size:
            return False
        if not self.adaptive:
            return True
        c = self._costs.setdefault(batch_size, _Costs())
        c.decisions += 1
        if c.spec is None or c.plain is None:  # not timed yet: a speculating step first, then a plain one
            return c.spec is None
        pays = (batch_size + expected_accepted) * c.plain > batch_size * c.spec
        return pays != (c.decisions % PROBE_EVERY == 0)

    def observe(self, batch_size: int, speculated: bool, seconds: float) -> None:
        """A decode-only step of `batch_size` sequences took `seconds`, with proposals verified or not."""
        if not self.adaptive or batch_size > self.max_batch_size or seconds <= 0:
            return
        c = self._costs.setdefault(batch_size, _Costs())
        old = c.spec if speculated else c.plain
        new = seconds if old is None else old + ALPHA * (seconds - old)
        if speculated:
            c.spec = new
        else:
            c.plain = new

    def costs(self, batch_size: int) -> tuple[float | None, float | None]:
        """(plain, speculating) seconds of a decode step measured at this batch size."""
        c = self._costs.get(batch_size, _Costs())
        return c.plain, c.spec
