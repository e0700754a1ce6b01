"""tcli's counterpart of Triton's `tritonfrontend` package: the KServe HTTP and gRPC front ends and the
metrics server, started on an in-process server (`tcli.inprocess`). Code written for Triton ports by
changing its imports:

    import tcli.inprocess as tritonserver
    from tcli.frontend import KServeGrpc, KServeHttp, Metrics

    server = tritonserver.Server(model_repository="model_repository").start(wait_until_ready=True)
    with KServeHttp(server, KServeHttp.Options(port=8000)), KServeGrpc(server), Metrics(server):
        ...  # tritonclient talks to localhost:8000 / :8001, Prometheus scrapes :8002/metrics

Named `tcli.frontend`, not `tritonfrontend`, so that it never hides Triton's own package where both
are installed (`import tcli.frontend as tritonfrontend` keeps Triton's name in ported code).
"""

from tcli.frontend._kserve_grpc import KServeGrpc
from tcli.frontend._kserve_http import KServeHttp
from tcli.frontend._metrics import Metrics
from tcli.frontend._service import OptionsError

__all__ = ["KServeGrpc", "KServeHttp", "Metrics", "OptionsError"]
