"""One change to kopf (1.45): its toggle sets wake their waiters only when the set turns.

At startup kopf holds back every handler until every indexed object is indexed: each object of
an indexed resource (member pods, ConsumerGroups) gets a toggle in one set, drops it once
indexed, and every object of every watched resource then waits for the whole set to be on. Each
drop woke every waiting object (`asyncio.Condition.notify_all`), though only the last one can
turn the set on: drops times waiters. Measured at a restart with the groups' member pods and
children present: 300 groups, about half of the 12.7 s before the first pass in
`ToggleSet.drop_toggle` and the wake-ups it caused (py-spy); 1,000 groups, 347 s before the
first pass. A waiter waits for the set's state (`ToggleSet.wait_for`), which only a change of
`is_on()` can satisfy, and a single toggle's own waiters are woken by the toggle itself
(`Toggle.turn_to`): so waking the set's waiters only when `is_on()` changes is the same
behaviour, without the wake-ups that change nothing.

`install()` replaces the three methods that add or drop toggles. It refuses (raises, so the
operator does not start) on a kopf it was not written for: a version outside `KNOWN_KOPF`
(the private methods it replaces are those of that series; pyproject.toml's `kopf` bound is the
same range), or a ToggleSet that no longer has what they use, rather than change a class it
does not know.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable

from kopf._cogs.aiokits import aiotoggles

KNOWN_KOPF = ("1.45", 2)
"""The kopf releases this patch was written for: the 1.45 series from 1.45.2 (checked on
1.45.2; pyproject.toml: `kopf>=1.45.2,<1.46`)."""

_USED = ("_condition", "_toggles", "is_on", "make_toggle", "drop_toggle", "drop_toggles")


async def _make_toggle(self: aiotoggles.ToggleSet, __val: bool = False, *,
                       name: str | None = None) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggles(self: aiotoggles.ToggleSet, toggles: Iterable[aiotoggles.Toggle]
                        ) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.difference_update(toggles)
        if self.is_on() != before:
            self._condition.notify_all()


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    await _drop_toggles(self, (toggle,))


def known_versions() -> str:
    series, first = KNOWN_KOPF
    return f"kopf {series}.{first} and later {series}.x releases"


def _next(series: str) -> str:
    major, minor = series.split(".")
    return f"{major}.{int(minor) + 1}"


def check_version(version: str) -> None:
    """Raise RuntimeError unless kopf `version` is one `KNOWN_KOPF` names."""
    series, first = KNOWN_KOPF
    head, _, rest = version.partition(".")
    minor, _, patch = rest.partition(".")
    release = patch.split("+")[0]
    if f"{head}.{minor}" == series and release.isdigit() and int(release) >= first:
        return
    raise RuntimeError(
        f"staticfleet's kopfpatch was written for {known_versions()} and this is kopf "
        f"{version}: install one of those (pip install 'kopf>={series}.{first},<{_next(series)}'), "
        "or "
        "check staticfleet/kopfpatch.py against this kopf before adding it to KNOWN_KOPF")


def install() -> None:
    """Replace kopf's ToggleSet methods that add and drop toggles (see the module); refuse a
    kopf it was not written for (`check_version`)."""
    check_version(importlib.metadata.version("kopf"))
    probe = aiotoggles.ToggleSet(all)
    missing = [name for name in _USED if not hasattr(probe, name)]
    if missing:
        raise RuntimeError(f"kopf's ToggleSet has no {', '.join(missing)}: staticfleet's "
                           "kopfpatch knows kopf 1.45's; check it against this kopf")
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
