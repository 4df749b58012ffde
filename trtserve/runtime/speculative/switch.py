"""Which sequences speculate this step: a fixed batch-size limit, or (by default) those expected to pay.

A proposed token costs one more row in the step that verifies it. With no `max_batch_size` set the
switch measures, per running-batch size B, a decode step without proposals (t_plain) and what each
proposal row adds to it (t_row, from the steps that verified some), and a sequence speculates when its
expected accepted tokens (its recent verifications' mean) buy more than the rows they take would at
the step's plain rate:

    expected accepted / proposals  >  t_row * B / t_plain

So sequences that quote their prompt speculate beside ones that do not, and the bar rises with the
batch as rows stop being nearly free. Each cost is timed before the rule applies (a plain step, then one
in which every sequence proposes), and every PROBE_EVERY steps the way not taken last is timed again:
a plain step, or one in which the sequence held back longest proposes whatever it is expected to keep
(so a sequence that has begun to quote its prompt is found, at the cost of one row set, not a batch's).
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY = 16  # steps at one batch size between timings of the way not taken
ALPHA = 0.25  # weight of a new step in the moving averages
EVERYONE = 0.0  # the bar at which every sequence with proposals speculates
PROBE = -1.0  # the bar of a probe: the sequence held back longest speculates, no other


@dataclass
class _Costs:
    plain: float | None = None  # seconds of a decode step with no proposals
    row: float | None = None  # seconds a proposal row adds to it
    decisions: int = 0
    speculated: bool = False  # whether the last step timed here verified proposals


class SpeculationSwitch:
    def __init__(self, max_batch_size: int | None):
        """max_batch_size: every sequence with proposals speculates in a step of at most that many, none above;
        None: sequences speculate by expected gain against measured cost, at any batch size."""
        self.max_batch_size = max_batch_size
        self.adaptive = max_batch_size is None
        self._costs: dict[int, _Costs] = {}

    def bar(self, batch_size: int) -> float | None:
        """The accepted tokens per proposal a sequence must expect to speculate in the next step of
        `batch_size` sequences (EVERYONE: any proposal; PROBE: the sequence held back longest only), or
        None: no sequence does."""
        if not self.adaptive:
            return EVERYONE if batch_size <= self.max_batch_size else None
        c = self._costs.setdefault(batch_size, _Costs())
        c.decisions += 1
        if c.plain is None:  # not timed yet: a plain step first, then one where every sequence proposes
            return None
        if c.row is None:
            return EVERYONE
        if c.decisions % PROBE_EVERY == 0:  # re-time the way not taken last
            return None if c.speculated else PROBE
        return c.row * batch_size / c.plain

    def observe(self, batch_size: int, proposals: int, seconds: float) -> None:
        """A decode-only step of `batch_size` sequences verifying `proposals` proposed tokens took `seconds`."""
        if not self.adaptive or seconds <= 0:
            return
        c = self._costs.setdefault(batch_size, _Costs())
        c.speculated = proposals > 0
        if not proposals:
            c.plain = _average(c.plain, seconds)
        elif c.plain is not None:
            c.row = _average(c.row, max(seconds - c.plain, 0.0) / proposals)

    def costs(self, batch_size: int) -> tuple[float | None, float | None]:
        """(plain step, one proposal row) seconds measured at this batch size."""
        c = self._costs.get(batch_size, _Costs())
        return c.plain, c.row


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + ALPHA * (new - old)
