"""The API's routes as the template declares them (``Events: {Type: Api}``), matched
against a request's method and resource path as API Gateway matches them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from fleetcast.embedded.lambdas import LocalFunction


@dataclass(frozen=True)
class ApiRoute:
    method: str  # upper case, or ANY
    resource: str  # /customers/{customer_id}/forecast
    function: LocalFunction
    api_key_required: bool
    pattern: re.Pattern[str]

    @classmethod
    def create(
        cls, method: str, resource: str, function: LocalFunction, api_key_required: bool
    ) -> ApiRoute:
        regex = ""
        for part in resource.strip("/").split("/"):
            greedy = re.fullmatch(r"\{(\w+)\+\}", part)
            single = re.fullmatch(r"\{(\w+)\}", part)
            if greedy:
                regex += f"/(?P<{greedy[1]}>.+)"
            elif single:
                regex += f"/(?P<{single[1]}>[^/]+)"
            elif part:
                regex += "/" + re.escape(part)
        return cls(
            method.upper(), resource, function, api_key_required, re.compile(f"^{regex or '/'}$")
        )

    def path_parameters(self, path: str) -> dict[str, str] | None:
        match = self.pattern.match(path)
        return {k: unquote(v) for k, v in match.groupdict().items()} if match else None


def resource_path_of(path: str, stage_prefix: str) -> str:
    return path[len(stage_prefix) :] or "/"
