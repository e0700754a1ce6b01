"""Poll mode's clock: local file events (watchdog, debounced) wake a poll of the model folders they
touched, and a poll of everything runs every interval, for buckets and for file systems that send
no events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from pathlib import Path

log = logging.getLogger("tcli.server")


class RepositoryPoller:
    """Poll mode: watchdog events (debounced) trigger a rescan, with a periodic scan as a fallback for
    file systems that send no events."""

    DEBOUNCE_S = 0.5

    def __init__(
        self, poll: Callable[[Collection[str] | None], object], paths: list[Path], interval_s: float
    ) -> None:
        self.poll = poll  # ModelManager.poll_once: of the model folders named, or (None) of everything
        self.paths = paths  # local folders whose file events wake the poll early
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._touched: set[str] = set()  # model folders named by file events since the last poll
        self._everything = False  # an event no model folder explains: poll all
        self._touched_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="repository-poll", daemon=True)
        self._observer: object | None = None

    def start(self) -> None:
        try:
            from watchdog.events import (
                DirCreatedEvent,
                DirDeletedEvent,
                DirModifiedEvent,
                DirMovedEvent,
                FileClosedEvent,
                FileCreatedEvent,
                FileDeletedEvent,
                FileModifiedEvent,
                FileMovedEvent,
                FileSystemEventHandler,
            )
            from watchdog.observers import Observer

            touched = self._touch

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event: object) -> None:
                    for attribute in ("src_path", "dest_path"):
                        path = getattr(event, attribute, "")
                        if path and "__pycache__" not in str(path):
                            touched(Path(str(path)))

            # changes only: the server's own reads (opens and closes without writing, 2 per model file
            # at load) overflowed inotify's queue with 10,000 models, and watchdog's recovery walks
            # the whole tree again
            changes = [
                FileCreatedEvent,
                DirCreatedEvent,
                FileDeletedEvent,
                DirDeletedEvent,
                FileMovedEvent,
                DirMovedEvent,
                FileModifiedEvent,
                DirModifiedEvent,
                FileClosedEvent,
            ]
            observer = Observer()
            for path in self.paths:
                observer.schedule(Handler(), str(path), recursive=True, event_filter=changes)
            observer.daemon = True
            observer.start()
            self._observer = observer
        except Exception as exc:  # no inotify here: the periodic scan still works
            log.warning("file watching unavailable (%s); polling every %ss", exc, self.interval_s)
        self._thread.start()

    def _touch(self, path: Path) -> None:
        """Note the model folder (the first name below a watched repository) that an event touched."""
        for repository in self.paths:
            if path.is_relative_to(repository) and path != repository:
                name = path.relative_to(repository).parts[0]
                if name.startswith(".") or name == "__pycache__":
                    return  # folders a scan skips
                with self._touched_lock:
                    self._touched.add(name)
                break
        else:
            with self._touched_lock:
                self._everything = True
        self._wake.set()

    def _take_touched(self) -> Collection[str] | None:
        with self._touched_lock:
            names, everything = self._touched, self._everything
            self._touched, self._everything = set(), False
        return None if everything or not names else names

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.interval_s if self.interval_s > 0 else None)
            if self._stop.is_set():
                return
            # debounce: wait until the folder has been quiet for a moment (editors write in steps)
            while self._wake.is_set():
                self._wake.clear()
                if self._stop.wait(self.DEBOUNCE_S):
                    return
            names = self._take_touched() if woken else None
            try:
                self.poll(names)
            except Exception as exc:  # a scan failing (folder briefly missing) must not end polling
                log.error("repository poll failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()  # type: ignore[attr-defined]
