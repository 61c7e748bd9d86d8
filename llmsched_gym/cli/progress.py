"""Progress bars of the long subcommands (rich, on the terminal): the harness and the
parameter search report progress through a plain callable, trace downloads through
pooch's progress-bar interface, and these draw it."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class ProgressBar:
    """A bar of ``done`` out of ``total``, as a context manager whose value is the callable
    ``(done, total[, best])`` that :func:`~llmsched_gym.evaluation.harness.evaluate` and
    :func:`~llmsched_gym.evaluation.tune.tune` call; ``best`` (a tuning trial) is shown
    beside it."""

    def __init__(self, label: str):
        self._bar = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"))
        self._task = None

    def __enter__(self) -> "ProgressBar":
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def __call__(self, done: int, total: int, best: dict | None = None) -> None:
        if self._task is None:
            self._task = self._bar.add_task("", total=total)
        desc = f"best {best['objective']:.4g} (trial {best['trial']})" if best else ""
        self._bar.update(self._task, completed=done, total=total, description=desc)


class DownloadBar:
    """A transient byte-count bar on stderr, in the form pooch's downloaders drive (``total``,
    ``update``, ``reset``, ``close``): ``traces download``'s."""

    def __init__(self, label: str):
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                             TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
        self._task = self._bar.add_task(label, total=None)
        self._bar.start()

    @property
    def total(self) -> float | None:
        return self._bar.tasks[0].total

    @total.setter
    def total(self, n: float | None) -> None:
        self._bar.update(self._task, total=n)

    def update(self, n: int) -> None:
        self._bar.update(self._task, advance=n)

    def reset(self) -> None:
        self._bar.reset(self._task)

    def close(self) -> None:
        self._bar.stop()
