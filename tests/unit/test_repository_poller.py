"""Poll mode's clock: a file event polls only the model folder it touched (a full scan of 10,000
model folders takes seconds; the changed folder is known), and the interval polls everything."""

from __future__ import annotations

import threading
from collections.abc import Collection
from pathlib import Path

from server.repository.poller import RepositoryPoller
from tests.waiting import wait_until


class Polls:
    """What the poller asked for, call by call."""

    def __init__(self) -> None:
        self.calls: list[set[str] | None] = []
        self.lock = threading.Lock()

    def __call__(self, names: Collection[str] | None) -> None:
        with self.lock:
            self.calls.append(None if names is None else set(names))

    def seen(self) -> list[set[str] | None]:
        with self.lock:
            return list(self.calls)


def _repository(tmp_path: Path) -> Path:
    for name in ("alpha", "beta"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    return tmp_path


def test_an_edit_polls_only_the_model_folder_it_touched(tmp_path: Path) -> None:
    repository, polls = _repository(tmp_path), Polls()
    poller = RepositoryPoller(polls, [repository], interval_s=3600)
    poller.start()
    try:
        (repository / "beta" / "config.pbtxt").write_text('name: "beta"\nmax_batch_size: 0\n')
        wait_until(lambda: bool(polls.seen()), "a poll after the edit", timeout=10)
        assert polls.seen()[0] == {"beta"}
        (repository / "alpha" / "2").mkdir()  # a new version folder is alpha's change alone
        wait_until(lambda: len(polls.seen()) >= 2, "a poll after the new version", timeout=10)
        assert polls.seen()[1] == {"alpha"}
    finally:
        poller.stop()


def test_a_new_model_folder_and_the_interval_poll_everything(tmp_path: Path) -> None:
    repository, polls = _repository(tmp_path), Polls()
    poller = RepositoryPoller(polls, [repository], interval_s=3600)
    poller.start()
    try:
        (repository / ".hidden").mkdir()  # a folder no scan serves wakes nothing by its name
        (repository / "gamma").mkdir()  # the repository's own listing changed
        wait_until(lambda: bool(polls.seen()), "a poll after the new folder", timeout=10)
        assert None in polls.seen()
    finally:
        poller.stop()
    interval_polls = Polls()
    short = RepositoryPoller(interval_polls, [repository], interval_s=0.2)
    short.start()
    try:
        wait_until(lambda: bool(interval_polls.seen()), "an interval poll", timeout=10)
        assert interval_polls.seen()[0] is None
    finally:
        short.stop()


def test_reading_the_repository_wakes_no_poll(tmp_path: Path) -> None:
    """The server reads every config and model file as it loads: reads must not count as changes
    (with 10,000 models their open/close events overflowed inotify's queue, and watchdog's recovery
    walked the whole tree again, delaying a new version by 24 s)."""
    repository, polls = _repository(tmp_path), Polls()
    poller = RepositoryPoller(polls, [repository], interval_s=3600)
    poller.start()
    try:
        for _ in range(20):
            (repository / "alpha" / "config.pbtxt").read_text()
            sorted((repository / "alpha").iterdir())
        (repository / "beta" / "config.pbtxt").write_text('name: "beta"\nmax_batch_size: 0\n')
        wait_until(lambda: bool(polls.seen()), "a poll after the edit", timeout=10)
        assert polls.seen()[0] == {"beta"}  # alpha, only read, is not among the touched folders
    finally:
        poller.stop()
