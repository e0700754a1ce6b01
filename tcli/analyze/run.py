"""`tcli analyze`'s run from a Plan to its outputs: where the candidates are measured (in-process or
on a running server), which models (the model itself, or an ensemble's or BLS model's composing
models one by one), the checkpoint's signature, and the reports and best configs written."""

from __future__ import annotations

from tcli.analyze.composing import composing_models
from tcli.analyze.measure import (
    InProcessTarget,
    InputOptions,
    RemoteTarget,
    Target,
    backend_of,
    start_inprocess,
)
from tcli.analyze.outputs import copy_model
from tcli.analyze.session import Session
from tcli.errors import CliError


def run(session: Session, url: str | None, protocol: str) -> None:
    """The analysis a Plan asks for: the model, or each of its composing models, measured in-process
    (a server started here) or on the server at `url`; the results reported, the best configs written."""
    plan = session.plan
    repository = plan.repository
    server = start_inprocess(repository) if url is None and repository is not None else None

    def target_for(name: str, inputs: InputOptions | None = None) -> Target:
        chosen = inputs if inputs is not None else plan.inputs
        if server is not None and repository is not None:
            return InProcessTarget(server, repository, name, chosen)
        assert url is not None
        return RemoteTarget(url, protocol, name, chosen)

    top: Target | None = None
    try:
        top = target_for(plan.model)
        completed = top.completed_config()
        backend = backend_of(completed)
        folder = plan.repository / plan.model if plan.repository is not None else None
        names = composing_models(completed, backend, folder, plan.repository)
        if names:
            kind = (
                "an ensemble" if backend == "ensemble" or completed.platform == "ensemble" else "a BLS model"
            )
            session.say(
                f"model '{plan.model}' is {kind}: tcli analyze measures its composing models one by one, each "
                f"on its own with {plan.inputs.generated} "
                f"inputs: {', '.join(names)}"
            )
        else:
            top.check()
            names = [plan.model]
        signature = {
            "model": plan.model,
            "where": plan.where,
            "mode": plan.mode,
            "measure": plan.measure.signature(),
            "constraints": [
                plan.constraints.latency_budget_ms,
                plan.constraints.min_throughput,
                plan.constraints.objective,
            ],
            "bounds": repr(plan.bounds),
            "inputs": repr(plan.inputs),
        }
        session.checkpoint = session.open_checkpoint(signature)
        failures: list[str] = []
        results = []
        for name in names:
            if name == plan.model:
                target = top
            else:
                target = target_for(name, plan.inputs.for_composing())
                target.check()
            try:
                result = session.analyze(target, name)
            finally:
                if target is not top:
                    target.close()
            results.append(result)
            plot = plan.plot
            if plot is not None and len(names) > 1:
                plot = plot.with_name(f"{plot.stem}.{name}{plot.suffix or '.png'}")
            session.report(result, plot)
            if result.best is None:
                failures.append(session.miss_message(result))
        if failures:
            raise CliError("; ".join(failures))
        if plan.output_dir is not None:
            for result in results:
                source = plan.repository / result.name if plan.repository is not None else None
                session.write_best(result, source if source is not None and source.is_dir() else None)
            if names != [plan.model] and plan.repository is not None:
                copy_model(plan.output_dir, plan.repository / plan.model, plan.link)
                session.say(f"copied {plan.model} unchanged beside its composing models")
    finally:
        if top is not None:
            top.close()
        if server is not None:
            server.stop()
