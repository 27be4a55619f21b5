"""Group commit: callers waiting together share one run; each gets its own result."""

from __future__ import annotations

import asyncio

import pytest

from posthaste.services.group_commit import GroupCommit


class Recorder:
    def __init__(self, fail_on: set[int] | None = None) -> None:
        self.groups: list[list[int]] = []
        self.fail_on = fail_on or set()
        self.release = asyncio.Event()

    async def run(self, items: list[int]) -> list[int]:
        self.groups.append(items)
        if len(self.groups) == 1:
            await self.release.wait()  # hold the first run so the others queue up
        if self.fail_on & set(items):
            raise RuntimeError("database down")
        return [item * 10 for item in items]


async def test_callers_that_arrive_during_a_run_share_the_next_one() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.run, weight=lambda _: 1, max_weight=100)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(group.submit(n)) for n in range(2, 7)]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 10
    assert await asyncio.gather(*waiting) == [20, 30, 40, 50, 60]
    assert recorder.groups == [[1], [2, 3, 4, 5, 6]]


async def test_a_group_never_exceeds_the_weight_limit() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.run, weight=lambda item: item, max_weight=10)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(group.submit(n)) for n in (4, 5, 3, 20)]
    await asyncio.sleep(0)
    recorder.release.set()
    await asyncio.gather(first, *rest)
    assert recorder.groups == [[1], [4, 5], [3], [20]]


async def test_a_failed_run_fails_its_callers_only() -> None:
    recorder = Recorder(fail_on={3})
    group = GroupCommit(recorder.run, weight=lambda _: 1, max_weight=2)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0)
    failing = [asyncio.create_task(group.submit(n)) for n in (2, 3)]
    later = asyncio.create_task(group.submit(4))
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 10
    for task in failing:
        with pytest.raises(RuntimeError, match="database down"):
            await task
    assert await later == 40


async def test_a_caller_that_gives_up_does_not_break_the_others() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.run, weight=lambda _: 1, max_weight=100)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0)
    impatient = asyncio.create_task(group.submit(2))
    patient = asyncio.create_task(group.submit(3))
    await asyncio.sleep(0)
    impatient.cancel()
    recorder.release.set()
    assert await first == 10
    assert await patient == 30
    assert impatient.cancelled()
    assert recorder.groups == [[1], [3]]


async def settle() -> None:
    """Let every task that can run take its steps (submit, then the drainer it started)."""
    for _ in range(10):
        await asyncio.sleep(0)


class Held:
    """A run that holds each group until told, recording how many run at once."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.running = 0
        self.most_at_once = 0
        self.releases: list[asyncio.Event] = []

    async def run(self, items: list[int]) -> list[int]:
        self.groups.append(items)
        release = asyncio.Event()
        self.releases.append(release)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await release.wait()
        finally:
            self.running -= 1
        return [item * 10 for item in items]


async def test_with_two_runs_a_second_group_starts_while_the_first_is_in_flight() -> None:
    held = Held()
    group = GroupCommit(held.run, weight=lambda _: 1, max_weight=100, runs=2)
    first = asyncio.create_task(group.submit(1))
    await settle()
    second = asyncio.create_task(group.submit(2))
    await settle()
    assert held.groups == [[1], [2]] and held.running == 2
    # Both runs busy: what comes now waits, and shares the next group.
    waiting = [asyncio.create_task(group.submit(n)) for n in (3, 4, 5)]
    await settle()
    assert held.groups == [[1], [2]]
    held.releases[1].set()
    assert await second == 20
    await settle()
    assert held.groups == [[1], [2], [3, 4, 5]]
    held.releases[0].set()
    held.releases[2].set()
    assert await first == 10
    assert await asyncio.gather(*waiting) == [30, 40, 50]
    assert held.most_at_once == 2
    await group.close()


async def test_a_caller_after_every_run_finished_is_served() -> None:
    # A drainer whose loop found nothing left is done at once, but its done callbacks run only
    # after the caller it answered has resumed: that caller's next submit, made in the same step
    # (no task in between, hence asyncio.timeout and not wait_for), must still get a run.
    for runs in (1, 2):
        recorder = Recorder()
        recorder.release.set()
        group = GroupCommit(recorder.run, weight=lambda _: 1, max_weight=100, runs=runs)
        async with asyncio.timeout(30):
            assert await group.submit(1) == 10
            assert await group.submit(2) == 20
            assert await group.submit(3) == 30


def test_runs_must_be_at_least_one() -> None:
    with pytest.raises(ValueError):
        GroupCommit(Recorder().run, weight=lambda _: 1, max_weight=1, runs=0)
