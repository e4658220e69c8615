"""The progress bar of long runs (sweeps, searches): rich, with done/total, the rate (items per
second, over rich's recent window) and the time elapsed and left."""

from __future__ import annotations


def progress_bar(enabled: bool):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Items per second (blank until rich has a rate)."""

        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f}/s" if speed >= 10 else f"{speed:.1f}/s")

    return Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
