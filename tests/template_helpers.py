"""template.yaml as plain data, for tests, through the local stack's one template reader
(:func:`fleetcast.embedded.template.loads_template`): CloudFormation short tags become
the long form, ``!Ref X`` -> ``{"Ref": "X"}``, ``!GetAtt A.B`` -> ``{"Fn::GetAtt": ["A", "B"]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetcast.embedded import template

REPO_ROOT = Path(__file__).resolve().parents[1]

loads_template = template.loads_template


def load_template(path: str | Path = "template.yaml") -> dict[str, Any]:
    """Load a template; a relative path is taken from the repository root."""
    resolved = Path(path)
    if not resolved.is_absolute():
        resolved = REPO_ROOT / resolved
    return template.load_template(resolved)


def local_template(parameters: dict[str, str] | None = None) -> template.LocalTemplate:
    """template.yaml as the local stack reads and resolves it: parameters' defaults (or
    ``parameters``), the stack named ``fleetcast`` (JobNamePrefix's default), the local
    account and region."""
    return template.LocalTemplate(REPO_ROOT / "template.yaml", parameter_overrides=parameters or {})
