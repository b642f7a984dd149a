"""The speed race (engine.race): tokens shown at a time, from a lane's first-token time and decode rate."""

from __future__ import annotations

from walkthrough.costs.machines import MachineRow
from walkthrough.costs.measured import Measured
from walkthrough.costs.race import Lane, finish_time, lanes, tokens_shown


def test_tokens_appear_at_first_token_then_one_per_interval():
    lane = Lane("x", 0.5, 4.0)
    assert [tokens_shown(lane, t, 10) for t in (0.0, 0.4, 0.5, 0.74, 0.75, 1.0, 100.0)] == [0, 0, 1, 1, 2, 3, 10]
    assert finish_time(lane, 10) == 0.5 + 9 / 4.0
    assert tokens_shown(lane, finish_time(lane, 10), 10) == 10
    assert tokens_shown(lane, 1.0, 0) == 0


def test_lanes_skip_machines_that_cannot_hold_the_file_and_add_the_measured_run():
    fits = MachineRow("a", "A", 1e9, 1e11, "fits", "", 60.0, 50.0, 0.2, None)
    no = MachineRow("b", "B", 1e9, 1e11, "does not fit", "short", None, None, None, None)
    run = Measured("numpy", 20, 0.4, 5, 2.0, 1000)
    got = lanes([fits, no], run)
    assert got == [Lane("a", 0.2, 50.0, modelled=True), Lane("here (numpy, measured)", 0.4, 2.5)]
    assert lanes([fits], None) == [Lane("a", 0.2, 50.0, modelled=True)]
