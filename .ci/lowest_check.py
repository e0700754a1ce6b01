"""Checks that an environment built by `make test-oldest` holds each of tcli's requirements at its
declared lower bound, so that the suite that runs next tests those bounds and not newer versions.

uv's lowest-direct resolution treats a lower bound as a preference: when the lowest version cannot
be installed (its own requirements clash with another's, or it has no wheel for this Python), uv
quietly takes a newer one. This names each such requirement and exits 1; the fix is to raise the
bound in pyproject.toml to the version named.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

# extras that `make test-oldest` does not install (no GPU on the test machines)
UNTESTED_EXTRAS = {"gpu"}


def requirements(pyproject: Path) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    found = [Requirement(text) for text in project["dependencies"]]
    for extra, texts in project["optional-dependencies"].items():
        if extra not in UNTESTED_EXTRAS:
            found += [Requirement(text) for text in texts]
    return [r for r in found if r.name != project["name"] and (r.marker is None or r.marker.evaluate())]


def lower_bound(requirement: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    return max(bounds) if bounds else None


def main() -> int:
    wrong = []
    for requirement in requirements(Path(__file__).resolve().parents[1] / "pyproject.toml"):
        bound = lower_bound(requirement)
        if bound is None:
            continue
        try:
            installed = Version(metadata.version(requirement.name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{requirement.name}: not installed")
            continue
        if Version(installed.base_version) != bound:  # torch 2.13.0+cpu is 2.13
            wrong.append(f"{requirement}: installed {installed}")
    for line in wrong:
        print(f"lower bound not tested: {line}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
