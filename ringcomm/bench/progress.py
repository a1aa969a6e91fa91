"""The live progress line of a long sweep: which implementation, which size, how long so far.

The ranks run in other processes; rank 0 of each notes the size it starts in a small file
(worker.progress_path()), which a thread here reads and shows with rich's progress bar. Only on a
terminal: piped or redirected output stays exactly the tables.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ringcomm.bench.sizes import human

if TYPE_CHECKING:
    from rich.progress import Progress

_POLL_SECONDS = 0.2


class SweepProgress:
    """``with SweepProgress(enabled, nsizes) as progress: progress.track(name, file, run)``."""

    def __init__(self, enabled: bool, nsizes: int, console=None):
        self.enabled, self.nsizes = enabled, nsizes
        self._progress: Optional[Progress] = None
        self._console = console

    def __enter__(self) -> "SweepProgress":
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,  # gone when done: the tables are what stays on the screen
            )
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def track(self, implementation: str, progress_file: Optional[Path], run):
        """run() (an implementation's whole sweep), showing its progress as rank 0 notes it."""
        progress = self._progress
        if progress is None or progress_file is None:
            return run()
        task = progress.add_task(f"{implementation}: starting", total=self.nsizes)
        done = threading.Event()

        def follow() -> None:
            while not done.wait(_POLL_SECONDS):
                note = _read(progress_file)
                if note is not None:
                    progress.update(
                        task,
                        completed=note["index"],
                        description=f"{implementation}: {human(note['size'])}",
                    )

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            return run()
        finally:
            done.set()
            follower.join()
            progress.remove_task(task)


def _read(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
