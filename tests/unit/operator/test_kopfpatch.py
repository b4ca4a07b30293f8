"""kopf's toggle sets with `kopfpatch`: waiters are woken when the set turns, not on every
drop (the startup's index pre-population: drops times waiters)."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.aiokits import aiotoggles

from staticfleet import kopfpatch

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("make_toggle", "drop_toggle", "drop_toggles"):
        monkeypatch.setattr(aiotoggles.ToggleSet, name, getattr(aiotoggles.ToggleSet, name))
    kopfpatch.install()  # undone by monkeypatch after the test


def test_waiters_wake_once_when_the_last_toggle_is_dropped() -> None:
    async def scenario() -> tuple[int, int, bool]:
        toggles = aiotoggles.ToggleSet(all)
        mine = [await toggles.make_toggle(False) for _ in range(50)]
        checks = [0]
        is_on = toggles.is_on

        def counted() -> bool:
            checks[0] += 1
            return is_on()

        toggles.is_on = counted  # type: ignore[method-assign]
        waiters = [asyncio.create_task(toggles.wait_for(True)) for _ in range(20)]
        await asyncio.sleep(0)
        start = checks[0]
        for toggle in mine[:-1]:
            await toggles.drop_toggle(toggle)
            await asyncio.sleep(0)  # let any woken waiter run
        between = checks[0] - start
        await toggles.drop_toggles(mine[-1:])
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        return between, len(toggles), all(w.done() for w in waiters)

    between, left, done = asyncio.run(scenario())
    # Each drop checks the set twice (before and after); no waiter re-checked in between.
    assert between == 2 * 49
    assert left == 0 and done


def test_a_set_turning_off_wakes_those_waiting_for_off() -> None:
    async def scenario() -> bool:
        toggles = aiotoggles.ToggleSet(all)
        await toggles.make_toggle(True)
        waiting = asyncio.create_task(toggles.wait_for(False))
        await asyncio.sleep(0)
        await toggles.make_toggle(False)
        await asyncio.wait_for(waiting, 5)
        return waiting.done()

    assert asyncio.run(scenario())


def test_an_individual_toggles_waiters_still_wake_on_its_turn() -> None:
    async def scenario() -> bool:
        toggles = aiotoggles.ToggleSet(any)
        one = await toggles.make_toggle(False)
        waiting = asyncio.create_task(one.wait_for(True))
        await asyncio.sleep(0)
        await one.turn_to(True)
        await asyncio.wait_for(waiting, 5)
        return toggles.is_on()

    assert asyncio.run(scenario())


def test_install_refuses_a_toggle_set_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(aiotoggles.ToggleSet, "drop_toggles")
    with pytest.raises(RuntimeError, match="drop_toggles"):
        kopfpatch.install()


@pytest.mark.parametrize("version", ["1.45.2", "1.45.3", "1.45.10", "1.45.2+local"])
def test_the_kopf_versions_it_was_written_for_pass(version: str) -> None:
    kopfpatch.check_version(version)


@pytest.mark.parametrize("version", ["1.38.0", "1.45.0", "1.45.1", "1.46.0", "2.0.0", "1.45",
                                     "1.45.0rc1"])
def test_a_kopf_it_was_not_written_for_is_refused_naming_those_it_knows(version: str) -> None:
    with pytest.raises(RuntimeError) as err:
        kopfpatch.check_version(version)
    message = str(err.value)
    assert f"this is kopf {version}" in message
    assert "kopf 1.45.2 and later 1.45.x releases" in message
    assert "'kopf>=1.45.2,<1.46'" in message


def test_install_checks_the_installed_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version read is the installed distribution's: a faked 1.38 (the old lower bound,
    which has no `settings.watching.label_selectors`) is refused before anything is replaced."""
    monkeypatch.setattr(kopfpatch.importlib.metadata, "version",
                        lambda name: "1.38.0" if name == "kopf" else "0")
    monkeypatch.setattr(aiotoggles.ToggleSet, "drop_toggle", "the one before")
    with pytest.raises(RuntimeError, match=r"this is kopf 1\.38\.0"):
        kopfpatch.install()
    assert aiotoggles.ToggleSet.drop_toggle == "the one before"
