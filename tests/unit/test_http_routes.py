"""The HTTP routes are one table: every path Triton serves finds its handler and restricted-API group
in one match, and a path it does not serve finds nothing (404)."""

from __future__ import annotations

import pytest

from server.frontends.http.app import ROUTES, HttpFrontend
from server.frontends.http.routes import Route, RouteTable
from server.protocol.restricted import GROUPS

F = HttpFrontend
# path -> (handler, group, parameters), as Triton's HTTP server routes them
SERVED = {
    "/v2": (F._server_metadata, "metadata", ()),
    "/v2/health/live": (F._live, "health", ()),
    "/v2/health/ready": (F._ready, "health", ()),
    "/v2/models/stats": (F._statistics, "statistics", ()),
    "/v2/models/add_sub": (F._model_metadata, "metadata", ("add_sub", "")),
    "/v2/models/add_sub/versions/3": (F._model_metadata, "metadata", ("add_sub", "3")),
    "/v2/models/add_sub/ready": (F._model_ready, "health", ("add_sub", "")),
    "/v2/models/add_sub/config": (F._model_config, "model-config", ("add_sub", "")),
    "/v2/models/add_sub/stats": (F._statistics, "statistics", ("add_sub", "")),
    "/v2/models/add_sub/versions/2/infer": (F._infer, "inference", ("add_sub", "2")),
    "/v2/models/a%2Fb/infer": (F._infer, "inference", ("a/b", "")),
    "/v2/models/stats/infer": (F._infer, "inference", ("stats", "")),  # a model named stats
    "/v2/models/llm/generate": (F._generate, "inference", ("llm", "")),
    "/v2/models/llm/generate_stream": (F._generate_events, "inference", ("llm", "")),
    "/v2/models/add_sub/trace/setting": (F._trace, "trace", ("add_sub",)),
    "/v2/trace/setting": (F._trace, "trace", ()),
    "/v2/logging": (F._logging, "logging", ()),
    "/v2/systemsharedmemory/status": (F._system_shm, "shared-memory", ("", "status")),
    "/v2/systemsharedmemory/region/r%201/register": (F._system_shm, "shared-memory", ("r 1", "register")),
    "/v2/cudasharedmemory/region/r/unregister": (F._cuda_shm, "shared-memory", ("r", "unregister")),
    "/v2/repository/index": (F._repository_index, "model-repository", ("",)),
    "/v2/repository/models/add_sub/load": (F._repository_model, "model-repository", ("", "add_sub", "load")),
    "/v2/repository/repo/models/m/unload": (F._repository_model, "model-repository", ("repo", "m", "unload")),
}


@pytest.mark.parametrize("path", sorted(SERVED))
def test_each_path_triton_serves_finds_its_handler_and_group(path: str) -> None:
    found = ROUTES.match(path)
    assert found is not None, path
    route, parameters = found
    assert (route.handler, route.group, parameters) == SERVED[path]


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v2/",
        "/v2/models",
        "/v2/models/add_sub/versions/1/trace/setting",  # Triton has no per-version trace settings
        "/v2/models/add_sub/versions/one",
        "/v2/models/add_sub/infer/extra",
        "/v2/health",
        "/v2/systemsharedmemory/region/r/delete",
        "/v2/repository/models/m",
    ],
)
def test_paths_triton_does_not_serve_find_nothing(path: str) -> None:
    assert ROUTES.match(path) is None


def test_every_route_names_a_restricted_group_and_its_methods() -> None:
    for route in ROUTES.routes:
        assert route.group in GROUPS, route
        assert route.methods and set(route.methods) <= {"GET", "POST"}, route


def test_the_first_route_listed_wins() -> None:
    async def first(*_: object) -> None: ...

    async def second(*_: object) -> None: ...

    table = RouteTable(
        [Route(("GET",), r"/a/(b)", first, "health"), Route(("GET",), r"/a/([^/]+)", second, "trace")]
    )
    assert table.match("/a/b") == (table.routes[0], ("b",))
    assert table.match("/a/c") == (table.routes[1], ("c",))


def test_a_fixed_path_listed_after_a_pattern_that_matches_it_is_refused() -> None:
    async def handler(*_: object) -> None: ...

    with pytest.raises(ValueError, match="/models/stats comes after /models/"):
        RouteTable(
            [
                Route(("GET",), r"/models/([^/]+)", handler, "metadata"),
                Route(("GET",), "/models/stats", handler, "statistics"),
            ]
        )
    fixed_first = RouteTable(
        [
            Route(("GET",), "/models/stats", handler, "statistics"),
            Route(("GET",), r"/models/([^/]+)", handler, "metadata"),
        ]
    )
    assert fixed_first.match("/models/stats") == (fixed_first.routes[0], ())
