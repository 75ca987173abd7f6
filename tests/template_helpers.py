"""template.yaml as plain data, for tests: CloudFormation short tags become the long form.

``!Ref X`` -> ``{"Ref": "X"}``, ``!GetAtt A.B`` -> ``{"Fn::GetAtt": ["A", "B"]}``,
``!Sub ...`` -> ``{"Fn::Sub": ...}`` and so on, in scalar, sequence and mapping form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]

# Every short tag CloudFormation accepts; all but Ref and Condition are "Fn::" functions.
_FUNCTION_TAGS = (
    "And",
    "Base64",
    "Cidr",
    "Equals",
    "FindInMap",
    "GetAZs",
    "GetAtt",
    "If",
    "ImportValue",
    "Join",
    "Length",
    "Not",
    "Or",
    "Select",
    "Split",
    "Sub",
    "ToJsonString",
    "Transform",
)
_SHORT_TAGS = {"Ref": "Ref", "Condition": "Condition"} | {
    tag: f"Fn::{tag}" for tag in _FUNCTION_TAGS
}


class CloudFormationLoader(yaml.SafeLoader):
    """A SafeLoader that reads CloudFormation's short-form intrinsic functions."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    if tag_suffix not in _SHORT_TAGS:
        raise yaml.constructor.ConstructorError(
            None, None, f"unknown CloudFormation tag !{tag_suffix}", node.start_mark
        )
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if tag_suffix == "GetAtt":
            # "Resource.Attribute"; attributes may themselves contain dots.
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # pragma: no cover - yaml has no other node kinds
        raise TypeError(node)
    return {_SHORT_TAGS[tag_suffix]: value}


CloudFormationLoader.add_multi_constructor("!", _construct_intrinsic)


def loads_template(text: str) -> dict[str, Any]:
    loaded = yaml.load(text, Loader=CloudFormationLoader)  # a SafeLoader subclass
    if not isinstance(loaded, dict):
        raise ValueError("a template is a mapping at the top level")
    return loaded


def load_template(path: str | Path = "template.yaml") -> dict[str, Any]:
    """Load a template; a relative path is taken from the repository root."""
    resolved = Path(path)
    if not resolved.is_absolute():
        resolved = REPO_ROOT / resolved
    return loads_template(resolved.read_text())
