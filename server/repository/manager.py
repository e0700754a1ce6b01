"""The model lifecycle: load, reload and unload models from repositories (local folders, or object
storage through a local copy: sources.py), with Triton's control modes (none, poll, explicit) and the
models' repository agents (agents/).

A (re)load builds a complete new ServedModel beside the old one and swaps it in with one dict
assignment: requests already holding the old model finish on its runners, which are then drained and
unloaded. A reload whose new version fails keeps the old version serving. A reload that changes only
a version's instance_group updates its instances in place, as Triton does (`_update_instances`).

Long: locating, building, swapping in and retiring a model all work under one lock over one dict of
served models, with the load options every step reads; pieces that stand alone already live beside
it (load_failures.py, request_files.py, poller.py, sources.py, memory.py).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from server.backends.base import DEFAULT_BACKEND_DIRECTORY, ModelContext
from server.backends.devices import visible_gpu_count
from server.config import backends
from server.config.model_folder import ModelFolder, scan_model, select_versions
from server.config.validate import response_cache_refusal
from server.protocol.errors import (
    ErrorCode,
    TritonError,
    internal,
    invalid_arg,
    model_not_found,
    no_available_versions,
    version_not_found,
    version_not_ready,
)
from server.repository.load_failures import (
    NO_VERSION,
    failed_model,
    load_failure,
    poll_failed,
    refused_reason,
)
from server.repository.memory import release_freed_memory
from server.repository.models import ModelState, ServedModel, StatsBook, VersionEntry
from server.repository.request_files import RequestFiles
from server.repository.sources import LocalRepository, Repository, open_repository

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.repository.agents.chain import AgentChain
    from server.repository.poller import RepositoryPoller
    from server.scheduling.rate_limiter import RateLimiter
    from server.scheduling.response_cache import ResponseCache
    from server.scheduling.runner import ModelRunner

log = logging.getLogger("tcli.server")


class ControlMode(enum.StrEnum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class LoadOptions:
    """How models are read and loaded: tritonserver's model-repository flags."""

    auto_complete: bool = True  # False: --disable-auto-complete-config (--strict-model-config=true)
    config_name: str = ""  # --model-config-name
    threads: int = 4  # --model-load-thread-count: models loaded side by side at start-up
    retries: int = 0  # --model-load-retry-count
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # --backend-config
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY  # --backend-directory (Python-based backends)
    rate_limiter: RateLimiter | None = None  # --rate-limit=execution_count: one for every model


class ModelManager:
    def __init__(
        self,
        repositories: Sequence[Path | str | Repository],
        mode: ControlMode = ControlMode.NONE,
        repoagent_directories: Sequence[Path] = (),
        *,
        options: LoadOptions | None = None,
    ) -> None:
        self.repositories: list[Repository] = [
            open_repository(r) if isinstance(r, str | Path) else r for r in repositories
        ]
        # a local repository folder not there at start-up: the server failed to initialize, and is
        # never live (Triton's SERVER_FAILED_TO_INITIALIZE, served on with --exit-on-error=false)
        self.initialize_failed = any(
            isinstance(r, LocalRepository) and not r.listed for r in self.repositories
        )
        self.repoagent_directories = list(repoagent_directories)
        self.options = options or LoadOptions()
        self.mode = mode
        self.stats = StatsBook()
        # the server's response cache (--cache-config), set by the composition root; None: no cache
        self.response_cache: ResponseCache | None = None
        self.gpu_count = visible_gpu_count()
        self._models: dict[str, ServedModel] = {}
        self._lock = threading.RLock()  # guards the model table's updates; readers never take it
        self._name_locks: dict[str, threading.RLock] = {}  # one load/unload of a model at a time
        self._ensembles_loading: dict[str, set[str]] = {}  # ensembles loading -> the models they run
        self._listeners: list[Callable[[str], None]] = []
        self._poller: RepositoryPoller | None = None
        self._origins: dict[str, Repository] = {}  # the repository each model was last loaded from
        self._request_files: dict[str, RequestFiles] = {}  # models loaded from their load request's files
        self._starting = False  # load_startup is running: one heap trim at its end, not one per model
        self._missing_at_startup: list[str] = []  # --load-model names no repository holds
        self._cancelled = False  # cancel_loading(): the server stops, and loads no more

    # discovery -------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read what each repository holds now (one listing of each bucket); a repository that cannot
        be read keeps what it last listed, and says why in the log and in `repository_errors`."""
        for repository in self.repositories:
            try:
                repository.refresh()
            except (TritonError, OSError) as exc:
                message = exc.message if isinstance(exc, TritonError) else str(exc)
                log.error("failed to read model repository '%s': %s", repository.label, message)

    def repository_errors(self) -> dict[str, str]:
        return {r.label: r.error for r in self.repositories if r.error}

    def repositories_listed(self) -> bool:
        """Every repository has been read at least once (a bucket that never answered is not)."""
        return all(r.listed for r in self.repositories)

    def folders(self) -> dict[str, ModelFolder]:
        return {name: folder for name, (_, folder) in self._located().items()}

    def _located(self) -> dict[str, tuple[Repository, ModelFolder]]:
        found: dict[str, tuple[Repository, ModelFolder]] = {}
        for repository in self.repositories:
            try:
                folders = repository.folders()
            except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
                log.error("failed to read model repository '%s': %s", repository.label, exc)
                continue
            for name, folder in folders.items():
                found.setdefault(name, (repository, folder))
        return found

    def _located_among(self, names: Collection[str]) -> dict[str, tuple[Repository, ModelFolder]]:
        """_located for these names only: the first repository holding each, as a full scan finds."""
        found: dict[str, tuple[Repository, ModelFolder]] = {}
        for name in sorted(names):
            with contextlib.suppress(TritonError):
                found[name] = self._locate(name)
        return found

    def _locate(self, name: str) -> tuple[Repository, ModelFolder]:
        for repository in self.repositories:
            folder = repository.folder(name)
            if folder is not None:
                return repository, folder
        raise poll_failed(name)

    # reading ---------------------------------------------------------------------------------------
    def models(self) -> dict[str, ServedModel]:
        return self._models

    def get(self, name: str) -> ServedModel:
        """The model by name. One whose config could not be read is not known, as in Triton (its
        repository poll failed, so it never reached Triton's model list)."""
        model = self._models.get(name)
        if model is None or model.config is None:
            raise model_not_found(name)
        return model

    def resolve(self, name: str, version: str = "") -> tuple[ServedModel, VersionEntry]:
        """The model and the version a request names ("" or -1: the highest ready version)."""
        model = self.get(name)
        if version in ("", "-1"):
            ready = model.ready_versions()
            if not ready:
                raise no_available_versions(name)
            return model, model.versions[ready[-1]]
        try:
            number = int(version)
        except ValueError:
            raise version_not_found(name, version) from None
        entry = model.versions.get(number)
        if entry is None:
            raise version_not_found(name, version)
        if entry.state != ModelState.READY:
            raise version_not_ready(name, version)
        return model, entry

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: a row per version (name, version, state, and the reason when
        there is one); a model that is not loaded is listed by name only. Unlike Triton, a model whose
        config could not be read, or that has no version to serve, keeps a row with the reason (Triton
        lists it by name only and leaves the reason to its log)."""
        rows: list[dict[str, str]] = []
        names = set(self._models)
        if not ready_only:
            names |= set(self.folders())
        for name in sorted(names):
            model = self._models.get(name)
            if model is None or not model.versions:
                if not ready_only:
                    rows.append({"name": name})
                continue
            for version, entry in sorted(model.versions.items()):
                if ready_only and entry.state != ModelState.READY:
                    continue
                row = {"name": name, "version": str(version), "state": str(entry.state)}
                if entry.reason:
                    row["reason"] = entry.reason
                elif model.refused_reload and entry.state == ModelState.READY:
                    # Triton says nothing here; a user editing a polled repository needs to see it
                    row["reason"] = model.refused_reload
                rows.append(row)
        return rows

    def all_ready(self) -> bool:
        """Strict readiness as Triton judges it: every version of every model READY, except versions
        that were unloaded on purpose (an explicit unload, or a version the policy no longer serves).
        A model whose config could not be read is not a model yet (Triton's poll failed): it counts not."""
        return all(
            m.versions
            and all(e.state == ModelState.READY or e.reason == _UNLOADED for e in m.versions.values())
            for m in self._models.values()
            if m.config is not None
        )

    def startup_failures(self) -> list[str]:
        """What failed at start-up, a line each: repositories that could not be read, models whose
        config could not be read, versions that did not load (tritonserver exits on any of them
        unless --exit-on-error=false)."""
        failures = [
            f"failed to read model repository '{label}': {error}"
            for label, error in self.repository_errors().items()
        ]
        failures += [
            f"failed to poll model '{name}': model not found in any model repository."
            for name in self._missing_at_startup
        ]
        for name, model in sorted(self._models.items()):
            for version, entry in sorted(model.versions.items()):
                if entry.state != ModelState.READY and entry.reason != _UNLOADED:
                    where = f"'{name}'" if version == NO_VERSION else f"'{name}' version {version}"
                    failures.append(f"failed to load {where}: {entry.reason}")
        return failures

    # changing --------------------------------------------------------------------------------------
    def load_startup(self, load_models: list[str] | None = None) -> None:
        """none/poll: every model in the repositories; explicit: only `load_models` ('*' = all).
        Models load side by side: framework imports and session set-up overlap, and a slow model
        does not hold back the others."""
        from concurrent.futures import ThreadPoolExecutor

        if self.mode == ControlMode.EXPLICIT and "*" not in (load_models or []):
            names = list(load_models or [])
            known = self.folders()
            # a --load-model name in no repository fails start-up, as in Triton
            self._missing_at_startup = [name for name in names if name not in known]
            for name in self._missing_at_startup:
                log.error("failed to poll model '%s': model not found in any model repository.", name)
            names = [name for name in names if name in known]
        else:
            names = list(self.folders())
        self._starting = True
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.threads), thread_name_prefix="load")
        try:
            list(pool.map(self._load_at_startup, names))
        except BaseException:  # interrupted (Ctrl-C in-process): the loads not begun never will
            self.cancel_loading()
            # the loads under way finish on their own (a framework's C++ cannot be stopped midway);
            # the interpreter's exit waits for them
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            self._starting = False
        pool.shutdown()
        release_freed_memory()

    def cancel_loading(self) -> None:
        """The server is stopping: start-up's models not begun are not loaded, no load starts an
        instance any more, and the loads under way, whose instances end under them, fail without a
        report."""
        self._cancelled = True

    def _load_at_startup(self, name: str) -> None:
        if self._cancelled:
            return
        with self._model_lock(name):
            loaded = self._models.get(name)
            if loaded is not None and loaded.ready_versions():
                return  # already loaded as a composing model of an ensemble
            for attempt in range(self.options.retries + 1):  # --model-load-retry-count
                try:
                    self.load(name)
                    return
                except TritonError as exc:
                    if self._cancelled:
                        return
                    retrying = attempt < self.options.retries
                    log.error(
                        "failed to load '%s': %s%s", name, exc.message, " (retrying)" if retrying else ""
                    )

    def _model_lock(self, name: str) -> threading.RLock:
        with self._lock:
            return self._name_locks.setdefault(name, threading.RLock())

    def load(
        self,
        name: str,
        config_override: ModelConfig | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> ServedModel:
        """(Re)load a model; raises TritonError when it ends with no ready version. The new model is
        built outside the table's lock, so other models load and serve meanwhile. `files` (a load
        request's `file:<path>` parameters, with a config override) replace the repository's folder
        for this load: the model is loaded from a temporary folder holding just them."""
        with self._model_lock(name):
            if files:
                if config_override is None:
                    raise invalid_arg(
                        f"failed to load '{name}', failed to poll from model repository: 'file:' "
                        "parameters need a 'config' parameter with the model's configuration"
                    )
                repository: Repository = RequestFiles(name, files)
                folder = repository.fetch(name)
            else:
                if self.mode == ControlMode.EXPLICIT:
                    self.refresh()  # an explicit load reads the model as the repository holds it now
                repository, folder = self._locate(name)
                current = self._models.get(name)
                if (
                    config_override is None
                    and current is not None
                    and current.built_from is not None
                    and current.path == folder.path
                    and current.built_from == repository.fingerprint(name)
                ):
                    return current  # nothing changed since it loaded: Triton loads nothing again
            new_files = repository if isinstance(repository, RequestFiles) else None
            try:
                return self._load_from(name, repository, folder, config_override)
            finally:
                self._settle_request_files(name, new_files)
                with self._lock:
                    self._ensembles_loading.pop(name, None)
                log.debug("OnLoadFinal() '%s' for all version(s)", name)  # Triton's verbose line

    def _settle_request_files(self, name: str, new_files: RequestFiles | None) -> None:
        """Keep the request files the model now serves from, remove any other (a failed load's, or
        those a plain reload from the repository replaced)."""
        serving = self._models.get(name)
        in_use = serving.path if serving is not None and serving.ready_versions() else None
        for files in {id(f): f for f in (self._request_files.pop(name, None), new_files) if f}.values():
            if in_use is not None and in_use.is_relative_to(files.path):
                self._request_files[name] = files
            else:
                files.close()

    def _load_from(
        self, name: str, repository: Repository, folder: ModelFolder, config_override: ModelConfig | None
    ) -> ServedModel:
        folder = replace(folder, config_name=self.options.config_name)
        self._origins[name] = repository
        with self._lock:
            old = self._models.get(name)
            if old is None:
                self._models[name] = ServedModel(
                    name,
                    folder.path,
                    versions={v: VersionEntry(v, ModelState.LOADING) for v in folder.versions},
                )
        new = self._build(repository, folder, config_override, old)
        if not self._starting:  # start-up trims once at its end: a trim walks the whole heap
            release_freed_memory()  # what loading freed: reading the model files, failed instances
        failed = not new.ready_versions()
        with self._lock:
            if failed and old is not None and old.ready_versions():
                # keep serving what works; the failure is reported, and a later fix is picked up
                old.fingerprint = new.fingerprint
                failure = load_failure(name, new)
                if self.mode == ControlMode.POLL:  # an explicit load answers its caller instead
                    old.refused_reload = refused_reason(new, failure)
                raise failure
            if old is not None:
                _keep_unloaded_versions(old, new)
            self._models[name] = new
            if old is not None:
                _retire(old, keep=new.runners())
            self._notify(name)
        if failed:
            raise load_failure(name, new)
        return new

    def unload(self, name: str) -> None:
        """Unload a model: its ready versions become UNAVAILABLE "unloaded"; versions that had failed
        keep their state and reason (Triton's index still shows why they failed)."""
        with self._model_lock(name), self._lock:
            model = self._models.get(name)
            if model is None:
                return
            log.debug("AsyncUnload() '%s'", name)  # Triton's verbose line
            self._models[name] = ServedModel(
                name,
                model.path,
                config=model.config,
                versions={
                    v: VersionEntry(v, ModelState.UNAVAILABLE, _UNLOADED)
                    if e.state in (ModelState.READY, ModelState.LOADING)
                    else VersionEntry(v, e.state, e.reason)
                    for v, e in model.versions.items()
                },
            )
            _retire(model)
            files = self._request_files.pop(name, None)
            if files is not None:
                files.close()
                if not any(r.folder(name) for r in self.repositories):  # known through its files only
                    del self._models[name]  # as Triton, which lists what its repositories hold
            self._notify(name)
            loading = [e for e, parts in self._ensembles_loading.items() if name in parts and e != name]
        for ensemble in loading:  # an ensemble loading with it finishes first, then goes with it (Triton)
            with self._model_lock(ensemble):
                pass
        with self._lock:
            dependents = [
                other.name
                for other in self._models.values()
                if any(
                    e.ensemble is not None and name in e.ensemble.composing_models()
                    for e in other.versions.values()
                )
            ]
        for dependent in dependents:  # an ensemble goes with a model it runs, as in Triton
            self.unload(dependent)

    def forget(self, name: str, repository: Repository | None = None) -> None:
        """A model whose folder is gone: unload it and drop it from the index (and its local copy)."""
        with self._model_lock(name), self._lock:
            model = self._models.pop(name, None)
            if model is not None:
                _retire(model)
                self._notify(name)
        if repository is not None:
            repository.drop(name)

    def shutdown(self, timeout: float | None = None) -> int:
        """Stop every model (their requests drained, their instances unloaded); returns how many model
        versions were unloaded."""
        if self._poller is not None:
            self._poller.stop()
        # the loads under way end first (cancelled ones end with their instance processes), as Triton
        # unloads once they have: up to `timeout`
        deadline = time.monotonic() + (30.0 if timeout is None else timeout)
        with self._lock:
            locks = list(self._name_locks.values())
        for lock in locks:
            if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                lock.release()
        with self._lock:
            models = list(self._models.values())
            for model in models:
                if model.runners():
                    log.debug("AsyncUnload() '%s'", model.name)  # Triton's verbose line
            # close every runner first: their workers drain side by side, not one model after another
            for model in models:
                for runner in model.runners():
                    runner.close()
            unloaded = 0
            for model in models:
                for runner in model.runners():
                    runner.finish(timeout)
                    _log_unloaded(runner)
                    unloaded += 1
                if model.agents is not None:
                    model.agents.unload()
        for repository in [*self.repositories, *self._request_files.values()]:
            repository.close()
        return unloaded

    def on_change(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def _notify(self, name: str) -> None:
        for listener in self._listeners:
            listener(name)

    # polling ---------------------------------------------------------------------------------------
    def poll_once(self, names: Collection[str] | None = None) -> list[str]:
        """Reload changed models, load new ones, drop removed ones; returns the names acted on. A
        repository that cannot be read keeps its models as they were. `names` (from local file
        events) limits the poll to those model folders: with 10,000 models a full scan takes
        seconds, while the folder that changed is known."""
        self.refresh()
        changed: list[str] = []
        located = self._located() if names is None else self._located_among(names)
        for name, (repository, _) in located.items():
            model = self._models.get(name)
            if model is not None and model.fingerprint == repository.fingerprint(name):
                continue
            changed.append(name)
            try:
                self.load(name)
            except TritonError as exc:
                if not self._cancelled:  # the server stops: the load was ended on purpose
                    log.error("Poll failed for model directory '%s': %s", name, exc.message)
        for name in list(self._models) if names is None else [n for n in names if n in self._models]:
            if name not in located:
                changed.append(name)
                self.forget(name, self._owner(name))
        return changed

    def _owner(self, name: str) -> Repository | None:
        return self._origins.get(name)

    def start_polling(self, interval_s: float) -> None:
        from server.repository.poller import RepositoryPoller

        paths = [path for repository in self.repositories for path in repository.local_paths()]
        self._poller = RepositoryPoller(self.poll_once, paths, interval_s)
        self._poller.start()

    # building --------------------------------------------------------------------------------------
    def _build(
        self,
        repository: Repository,
        folder: ModelFolder,
        config_override: ModelConfig | None,
        old: ServedModel | None = None,
    ) -> ServedModel:
        from server.repository.validation import load_refusals, validate_model
        from server.scheduling.request_checks import RequestRules

        fingerprint = repository.fingerprint(folder.name)
        try:
            folder, agents = self._materialize(repository, folder, config_override)
        except TritonError as exc:  # a download or an agent failed: the model cannot be read
            log.error("failed to load '%s': %s", folder.name, exc.message)
            return failed_model(
                ServedModel(folder.name, folder.path, None, fingerprint=fingerprint), folder, exc
            )
        report = validate_model(
            folder,
            auto_complete=self.options.auto_complete,
            gpu_count=self.gpu_count,
            config_override=config_override,
            backend_config=self.options.backend_config,
            backend_directory=self.options.backend_directory,
        )
        blocking = load_refusals(report)
        for problem in report.problems:  # what Triton loads anyway, it logs
            if problem.severity == "error" and not problem.blocks_load:
                log.warning("%s", problem.message)
        served = ServedModel(folder.name, folder.path, report.config, fingerprint=fingerprint, agents=agents)
        if blocking or report.config is None:
            reason = TritonError(ErrorCode.INVALID_ARG, blocking[0].message if blocking else "invalid config")
            if agents is not None:
                agents.finish(loaded=False)
                served.agents = None
            return failed_model(served, folder, reason)
        config = report.config
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose 1: what the server made of config.pbtxt
            from server.config.write import to_pbtxt

            log.debug("config of '%s' as served, auto-completed:\n%s", config.name, to_pbtxt(config).rstrip())
        if config.response_cache.enable and self.response_cache is None:  # Triton says nothing
            log.info(
                "model '%s' enables response_cache but the server has no cache: served without one "
                "(start it with --cache-config local,size=<bytes>)",
                config.name,
            )
        served.rules = RequestRules(config)
        served.labels = _read_labels(config, folder.path)
        versions = select_versions(config.version_policy, folder.versions)
        for version in versions:
            kept = _unchanged_version(old, served, folder, version)
            if kept is None and (updating := _instances_changed(old, served, folder, version)) is not None:
                kept = self._update_instances(config, folder, updating)
            served.versions[version] = kept or self._load_version(config, folder, version)
        if all(served.versions[v].state == ModelState.READY for v in versions):
            served.built_from = fingerprint
            log.info("successfully loaded '%s'", config.name)
        if agents is not None:
            agents.finish(loaded=bool(served.ready_versions()))
            if not served.ready_versions():
                served.agents = None
        return served

    def _materialize(
        self, repository: Repository, folder: ModelFolder, config_override: ModelConfig | None
    ) -> tuple[ModelFolder, AgentChain | None]:
        """The model's files on local disk, through its repository agents when its config lists some:
        the folder to load from (named as the model), and the agents to tell when it unloads."""
        from server.repository.agents.chain import AgentChain

        remote = repository.remote(folder.name)

        def fetched(config_only: bool = False) -> ModelFolder:
            return replace(repository.fetch(folder.name, config_only), config_name=folder.config_name)

        local = fetched(config_only=True) if remote else folder
        config = config_override if config_override is not None else _agent_config(local)
        if config is None or not config.model_repository_agents.agents:
            return (fetched() if remote else folder), None
        chain, path = AgentChain.load(
            config,
            None if remote else folder.path,
            remote.url if remote else None,
            lambda: fetched().path,
            self.repoagent_directories,
        )
        loaded = scan_model(path, folder.repository)
        return replace(loaded, name=folder.name, config_name=folder.config_name), chain

    def _load_ensemble(self, config: ModelConfig, version: int) -> VersionEntry:
        """Composing models load with the ensemble (when not loaded yet); the ensemble is READY when
        each of them has a ready version."""
        from server.config.ensemble_steps import ensemble_error
        from server.repository import ensemble_deps
        from server.scheduling.ensemble import EnsembleSchedule

        # what Triton's dependency graph refuses before loading any step (a circle of ensembles
        # would otherwise wait on its own loads)
        refusal = ensemble_deps.missing_models(config, self.folders()) or ensemble_deps.circular_dependency(
            config, self._steps_of
        )
        if refusal is not None:
            return VersionEntry(version, ModelState.UNAVAILABLE, f"Invalid argument: {refusal}")
        schedule = EnsembleSchedule(config, self.stats.get(config.name, version))
        with self._lock:  # an unload of a model it runs waits for this load (`unload`)
            self._ensembles_loading[config.name] = set(schedule.composing_models())
        composing: dict[str, ModelConfig] = {}
        loaded: dict[str, list[int]] = {}
        decoupled: set[str] = set()
        for dependency in schedule.composing_models():
            with self._model_lock(dependency):  # waits for a load of it already under way
                model = self._models.get(dependency)
                if model is None or (not model.ready_versions() and _not_loaded(model)):
                    with contextlib.suppress(TritonError):  # reported below as the ensemble's reason
                        self.load(dependency)
                model = self._models.get(dependency)  # read before an unload of it may take the lock
            if model is None or not model.ready_versions():
                return VersionEntry(
                    version,
                    ModelState.UNAVAILABLE,
                    f"Invalid argument: ensemble '{config.name}' depends on '{dependency}' which has no loaded version",
                )
            step_config = model.config
            if step_config is not None and step_config.model_transaction_policy.decoupled:
                if config.response_cache.enable:
                    refusal = response_cache_refusal(config.name, True, False)
                    return VersionEntry(version, ModelState.UNAVAILABLE, f"Invalid argument: {refusal}")
                decoupled.add(dependency)
            if step_config is not None:
                composing[dependency] = step_config
            loaded[dependency] = model.ready_versions()
        refusal = ensemble_deps.version_error(config, loaded) or ensemble_error(config, composing)
        if refusal is not None:
            return VersionEntry(version, ModelState.UNAVAILABLE, f"Invalid argument: {refusal}")
        # a decoupled step makes the ensemble decoupled, as Triton marks its config
        schedule.decoupled_models = frozenset(decoupled)
        if decoupled:
            config.model_transaction_policy.decoupled = True
        return VersionEntry(version, ModelState.READY, ensemble=schedule)

    def _steps_of(self, name: str) -> list[str]:
        """The models an ensemble's steps name, from its served or written config ([] for others)."""
        from server.config.parse import read_config

        model = self._models.get(name)
        config = model.config if model is not None else None
        if config is None:
            try:
                config, _ = read_config(self._locate(name)[1].config_path)
            except TritonError:
                return []
        return [step.model_name for step in config.ensemble_scheduling.step]

    def _runner(self, config: ModelConfig, folder: ModelFolder, entry: VersionEntry) -> ModelRunner:
        """A runner (not loaded yet) for `entry`'s version of the model, as `config` has it."""
        from server.scheduling.runner import ModelRunner

        settings = self.options.backend_config
        context = ModelContext(
            config,
            folder.path,
            entry.version,
            folder.repository,
            partial(_instance_failed, entry),
            {**settings.get("", {}), **settings.get(config.backend, {})},
            self.options.backend_directory,
        )
        return ModelRunner(
            context, self.stats.get(config.name, entry.version), rate_limiter=self.options.rate_limiter
        )

    def _update_instances(
        self, config: ModelConfig, folder: ModelFolder, entry: VersionEntry
    ) -> VersionEntry:
        """Triton's model instance update: a ready version whose config changed only in its
        instance_group keeps serving on the instances that stay, while the added ones are created;
        then its requests go to them all, and the removed ones are finalized once what they run is
        done. A failure leaves the version as it was (the reload fails, the old config serves on)."""
        previous = entry.runner
        if self._cancelled or previous is None:
            return VersionEntry(entry.version, ModelState.UNAVAILABLE, "the server is stopping")
        runner = self._runner(config, folder, entry)
        log.debug("updating the instances of '%s' version %d", config.name, entry.version)
        try:
            runner.load(previous)
        except TritonError as exc:
            return VersionEntry(entry.version, ModelState.UNAVAILABLE, exc.status_string())
        except Exception as exc:  # a backend failing in an unforeseen way fails only this update
            return VersionEntry(
                entry.version,
                ModelState.UNAVAILABLE,
                internal(f"{type(exc).__name__}: {exc}").status_string(),
            )
        entry.runner = runner  # the version's requests go to the new instance set from here on
        previous.step_down()
        return entry

    def _load_version(self, config: ModelConfig, folder: ModelFolder, version: int) -> VersionEntry:
        if config.platform == backends.ENSEMBLE:
            return self._load_ensemble(config, version)
        if self._cancelled:  # the server stops: no instance starts (a poll's reload, a load request)
            return VersionEntry(version, ModelState.UNAVAILABLE, "the server is stopping")
        entry = VersionEntry(version, ModelState.LOADING)
        runner = self._runner(config, folder, entry)
        log.debug(
            "loading '%s' version %d with backend '%s' from %s",
            config.name,
            version,
            config.backend or config.platform,
            folder.version_path(version),
        )
        try:
            runner.load()
        except TritonError as exc:
            return VersionEntry(version, ModelState.UNAVAILABLE, exc.status_string())
        except Exception as exc:  # a backend failing in an unforeseen way marks only this version
            return VersionEntry(
                version, ModelState.UNAVAILABLE, internal(f"{type(exc).__name__}: {exc}").status_string()
            )
        log.debug("loaded '%s' version %d", config.name, version)
        entry.state, entry.runner = ModelState.READY, runner
        return entry


_UNLOADED = "unloaded"  # the reason of an unloaded version, as Triton words it


def _instance_failed(entry: VersionEntry, reason: str) -> None:
    """An instance of this version gave up for good: the version is UNAVAILABLE with the reason (its
    other instances may still answer requests already routed to it)."""
    entry.state, entry.reason = ModelState.UNAVAILABLE, reason


def _keep_unloaded_versions(old: ServedModel, new: ServedModel) -> None:
    """Versions the old model served that the new one does not (a newer version took over, a version
    folder went) stay in the index as UNAVAILABLE "unloaded", as Triton keeps them."""
    for version, entry in old.versions.items():
        if version in new.versions or version == NO_VERSION:
            continue
        if entry.state in (ModelState.READY, ModelState.LOADING) or entry.reason == _UNLOADED:
            new.versions[version] = VersionEntry(version, ModelState.UNAVAILABLE, _UNLOADED)


def _agent_config(folder: ModelFolder) -> ModelConfig | None:
    """The config as written, for its repository agents; None when there is none or it does not parse
    (validation reports that)."""
    from server.config.parse import read_config

    try:
        return read_config(folder.config_path)[0] if folder.config_path.is_file() else None
    except TritonError:
        return None


def _not_loaded(model: ServedModel) -> bool:
    """Never loaded (its config is unreadable or it is loading) or unloaded, as opposed to failed."""
    return model.config is None or all(e.reason == _UNLOADED for e in model.versions.values())


def _read_labels(config: ModelConfig, model_dir: Path) -> dict[str, list[str]]:
    labels = {}
    for output in config.output:
        if output.label_filename:
            text = (model_dir / output.label_filename).read_text(encoding="utf-8")
            labels[output.name] = text.splitlines()
    return labels


def _unchanged_version(
    old: ServedModel | None, new: ServedModel, folder: ModelFolder, version: int
) -> VersionEntry | None:
    """The old model's ready entry for `version` when a reload need not load it again, as Triton
    decides: neither the version's files nor the model's other files (the config aside) changed, and
    the config differs at most in its version policy. An ensemble is always built again."""
    entry = _same_files(old, new, folder, version)
    if entry is None or old is None or old.config is None or new.config is None:
        return None
    before, after = type(old.config)(), type(new.config)()
    before.CopyFrom(old.config)
    after.CopyFrom(new.config)
    before.ClearField("version_policy")
    after.ClearField("version_policy")
    return entry if before == after else None


def _instances_changed(
    old: ServedModel | None, new: ServedModel, folder: ModelFolder, version: int
) -> VersionEntry | None:
    """The old model's ready entry for `version` when a reload changes only its instances (Triton's
    model instance update): the files as for `_unchanged_version`, the config the same less its
    instance_group and version policy."""
    from server.scheduling.instance_update import only_instances_differ

    entry = _same_files(old, new, folder, version)
    if entry is None or old is None or old.config is None or new.config is None:
        return None
    return entry if only_instances_differ(old.config, new.config) else None


def _same_files(
    old: ServedModel | None, new: ServedModel, folder: ModelFolder, version: int
) -> VersionEntry | None:
    """The old model's ready entry for `version` (run by a runner, from the same folder) when neither
    the version's files nor the model's other files (the config aside) changed."""
    if old is None or old.config is None or new.config is None or old.path != folder.path:
        return None
    entry = old.versions.get(version)
    if entry is None or entry.state != ModelState.READY or entry.runner is None:
        return None
    config_file = os.path.relpath(folder.config_path, folder.path)
    if _version_files(old.fingerprint, version, config_file) != _version_files(
        new.fingerprint, version, config_file
    ):
        return None
    return entry


def _version_files(fingerprint: tuple[object, ...], version: int, config_file: str) -> list[object]:
    """What of a folder fingerprint (relative path, size, mtime per file) concerns `version`: its own
    folder's files and the files outside every version folder, less the config."""
    mine: list[object] = []
    for item in fingerprint:
        if not isinstance(item, tuple) or not item or not isinstance(item[0], str):
            return list(fingerprint)  # not a local folder's: taken whole
        top = item[0].split(os.sep, 1)[0]
        if top == str(version) or (not top.isdigit() and item[0] != config_file):
            mine.append(item)
    return mine


def _log_unloaded(runner: ModelRunner) -> None:
    """Triton's words: its qa (L0_lifecycle) and its users count these lines."""
    log.info("successfully unloaded '%s' version %s", runner.name, runner.version)


def _retire(model: ServedModel, keep: list[ModelRunner] | None = None) -> None:
    """Drain and unload a replaced model's runners off the caller's thread, then tell its agents;
    `keep`: runners the model that replaces it took over."""
    runners = [runner for runner in model.runners() if not any(runner is k for k in keep or ())]
    agents, model.agents = model.agents, None
    if not runners and agents is None:
        return

    def stop() -> None:
        for runner in runners:
            runner.stop()
            _log_unloaded(runner)
        if agents is not None:
            agents.unload()
        release_freed_memory()

    threading.Thread(target=stop, name=f"retire-{model.name}", daemon=True).start()
