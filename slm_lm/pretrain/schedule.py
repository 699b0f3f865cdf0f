"""The pre-training schedule: the budget (minutes of a clock, or updates) and the learning rate along it."""
import time


def learning_rate(peak: float, fraction: float, warmup: float) -> float:
    """Linear warm-up over the first `warmup` of the budget, then linear decay to 0 at its end."""
    if fraction < warmup:
        return peak * fraction / warmup
    return peak * max(0.0, 1.0 - fraction) / max(1e-9, 1.0 - warmup)


class Budget:
    """Training spent against a budget, validation left out: seconds of the wall clock or of this
    process's CPU time, or, with `max_updates`, a number of updates (the same schedule on any machine).

    `spent` is the clock time spent, whatever the budget. `share(updates)` is the share of the budget spent
    after `updates` updates (the learning-rate schedule's clock). `fraction(updates)` is the same, or with
    `deadline` (wall-clock seconds for this process, validation included) the larger of the two shares:
    the run ends when it reaches 1, so it always ends by its deadline, and a run stopped by its deadline
    resumes (from its checkpoint) where its schedule left off.
    """

    def __init__(self, seconds: float, clock: str = "wall", spent: float = 0.0, deadline: float = 0.0,
                 max_updates: int = 0):
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
        if (seconds > 0) == (max_updates > 0):
            raise ValueError(f"give a budget of seconds or of updates, not both or neither "
                             f"(seconds={seconds}, max_updates={max_updates})")
        self.seconds, self.spent, self.deadline = seconds, spent, deadline
        self.max_updates = max_updates
        self._now = time.process_time if clock == "cpu" else time.monotonic
        self._started = time.monotonic()
        self._mark = None

    def resume(self):
        self._mark = self._now()

    def pause(self):
        if self._mark is not None:
            self.spent += self._now() - self._mark
            self._mark = None

    def share(self, updates: int) -> float:
        if self.max_updates:
            return updates / self.max_updates
        return (self.spent + (self._now() - self._mark if self._mark is not None else 0.0)) / self.seconds

    def fraction(self, updates: int) -> float:
        share = self.share(updates)
        if self.deadline:
            share = max(share, (time.monotonic() - self._started) / self.deadline)
        return share
