"""SAM's own translation of a template, run with the SAM environment's interpreter.

``aws-sam-translator`` pins a pydantic the project's environment cannot take, so the local
stack runs this file with ``.venv-sam/bin/python`` (``make up`` and ``make demo`` install
the translator alone there, the SAM CLI's targets the rest of SAM) and reads what it prints.
It imports nothing of fleetcast.

stdin: ``{"template": <template as data>, "parameters": {...}}``; stdout: the translated
``Resources`` of the types the local stack's IAM reads (roles and functions).
"""

import json
import sys

KEPT_TYPES = ("AWS::IAM::Role", "AWS::Lambda::Function")


class _NoManagedPolicyNames:
    """Policies named by managed policy name (not ARN) would need IAM's list: refused."""

    def load(self) -> dict[str, str]:
        raise RuntimeError("the local stack needs managed policies as ARNs, not names")


def main() -> None:
    from samtranslator.translator.transform import transform

    request = json.load(sys.stdin)
    template = request["template"]
    # As `sam validate` does: local code folders stand in as S3 URIs.
    for resource in template.get("Resources", {}).values():
        properties = resource.get("Properties") or {}
        for name in ("CodeUri", "ContentUri"):
            if isinstance(properties.get(name), str) and not properties[name].startswith("s3://"):
                properties[name] = "s3://local-code/placeholder"
    translated = transform(template, request["parameters"], _NoManagedPolicyNames())
    kept = {
        logical_id: resource
        for logical_id, resource in translated.get("Resources", {}).items()
        if resource.get("Type") in KEPT_TYPES
    }
    json.dump({"Resources": kept}, sys.stdout)


if __name__ == "__main__":
    main()
