"""The fault window's faults as they come due: each begun at its time (or skipped, and said
why), each ended after its hold, and each as planned and as applied on the run's timeline."""

from __future__ import annotations

import time

from exactly.chaos.plan import Fault
from exactly.chaos.world import World


class FaultWindow:
    def __init__(
        self, world: World, faults: list[Fault], timeline: list[dict[str, object]]
    ) -> None:
        self._world = world
        self.pending = list(faults)
        self.active: list[tuple[Fault, dict[str, object]]] = []
        self._timeline = timeline

    def begin_due(self, now: float) -> None:
        while self.pending and self.pending[0].at_s <= now:
            fault = self.pending.pop(0)
            entry: dict[str, object] = {
                "kind": fault.kind.value,
                "target": fault.target,
                "variant": fault.variant,
                "planned_at_s": round(fault.at_s, 1),
                "hold_s": round(fault.hold_s, 1),
                "began_s": round(now, 1),
            }
            # The node a cluster fault took, or why the fault was skipped: a skipped one
            # is reported as planned, not counted as injected.
            entry.update(self._world.begin(fault))
            self._timeline.append(entry)
            if "skipped" in entry:
                continue
            self.active.append((fault, entry))

    def end_due(self, now: float, window_start: float) -> None:
        """End the faults whose hold is over at ``now`` (seconds into the window, which began
        at ``window_start`` on the monotonic clock)."""
        for fault, entry in [pair for pair in self.active if pair[0].ends_s <= now]:
            self._world.end(fault)
            entry["ended_s"] = round(time.monotonic() - window_start, 1)
            self.active.remove((fault, entry))
