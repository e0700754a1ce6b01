"""Restricted OpenAI APIs (`--openai-restricted-api`), as Triton's OpenAI front end restricts them:
groups of endpoints that answer only requests carrying a given header with a given value, else 401
with an OpenAI error object. Triton's groups: inference (completions, chat completions,
embeddings), model-repository (the model list and model objects, load and unload), metrics, health.

A spec is tcli's form for every front end, `<api>[,<api>...]:<header>=<value>`, or Triton's three
words `<api>[,<api>...] <header> <value>` given as one value."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from server.protocol.restricted import Restriction, Restrictions, RestrictionSpecError

GROUPS = ("inference", "model-repository", "metrics", "health")


def parse_openai_restricted_api(specs: Iterable[str]) -> dict[str, Restriction]:
    found: dict[str, Restriction] = {}
    for spec in specs:
        words = spec.split()
        if len(words) == 3:
            names, header, value = words
        else:
            names, _, setting = spec.partition(":")
            header, _, value = setting.partition("=")
        if not (names and header and value):
            raise RestrictionSpecError(
                f"--openai-restricted-api takes '<api>[,<api>...]:<header>=<value>' (or Triton's "
                f"'<api>[,<api>...] <header> <value>'), got '{spec}'"
            )
        for group in names.split(","):
            if group not in GROUPS:
                raise RestrictionSpecError(
                    f"Unknown API '{group}' in --openai-restricted-api '{spec}' (one of: {', '.join(GROUPS)})"
                )
            if group in found:
                raise RestrictionSpecError(
                    f"restricted api '{group}' can not be specified in multiple config groups "
                    f"(--openai-restricted-api '{spec}')"
                )
            found[group] = Restriction(header, value)
    return found


class Refused(Exception):
    """A restricted group's request without its header: `body` is the 401 answer's."""

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body = body


class OpenAIRestrictions:
    def __init__(self, restrictions: Restrictions) -> None:
        self._rules = {
            group: (rule.header.lower().encode(), rule.value.encode(), _refusal(rule.header))
            for group, rule in restrictions.items()
        }

    def check(self, headers: list[tuple[bytes, bytes]], group: str) -> None:
        rule = self._rules.get(group)
        if rule is None:
            return
        header, value, body = rule
        if not any(key.lower() == header and given == value for key, given in headers):
            raise Refused(body)


def _refusal(header: str) -> bytes:
    message = f"This API is restricted, expecting header '{header}' with valid value"
    return orjson.dumps(
        {"error": {"message": message, "type": "authentication_error", "code": "invalid_auth"}}
    )
