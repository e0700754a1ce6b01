"""Poll mode's clock: local file events (watchdog, debounced) wake a poll early, and a poll also runs
every interval, for buckets and for file systems that send no events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("tcli.server")


class RepositoryPoller:
    """Poll mode: watchdog events (debounced) trigger a rescan, with a periodic scan as a fallback for
    file systems that send no events."""

    DEBOUNCE_S = 0.5

    def __init__(self, poll: Callable[[], object], paths: list[Path], interval_s: float) -> None:
        self.poll = poll  # one poll of every repository (ModelManager.poll_once)
        self.paths = paths  # local folders whose file events wake the poll early
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="repository-poll", daemon=True)
        self._observer: object | None = None

    def start(self) -> None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            wake = self._wake

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event: object) -> None:
                    if "__pycache__" not in str(getattr(event, "src_path", "")):
                        wake.set()

            observer = Observer()
            for path in self.paths:
                observer.schedule(Handler(), str(path), recursive=True)
            observer.daemon = True
            observer.start()
            self._observer = observer
        except Exception as exc:  # no inotify here: the periodic scan still works
            log.warning("file watching unavailable (%s); polling every %ss", exc, self.interval_s)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s if self.interval_s > 0 else None)
            if self._stop.is_set():
                return
            # debounce: wait until the folder has been quiet for a moment (editors write in steps)
            while self._wake.is_set():
                self._wake.clear()
                if self._stop.wait(self.DEBOUNCE_S):
                    return
            try:
                self.poll()
            except Exception as exc:  # a scan failing (folder briefly missing) must not end polling
                log.error("repository poll failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()  # type: ignore[attr-defined]
