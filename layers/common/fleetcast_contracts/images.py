"""What an image URI of a fleetcast job or endpoint must be: an ECR image, named by tag or
digest. template.yaml's image parameters use :data:`ECR_IMAGE_URI_PATTERN` as their
``AllowedPattern`` (a test holds them equal), the functions that start jobs check it
before calling SageMaker, and ``fleetcast images`` before writing samconfig.toml.

Why ECR only: SageMaker pulls a training or processing image from ECR, or from a private
registry only through a VPC (``TrainingImageConfig.TrainingRepositoryAccessMode=Vpc``),
which this stack has none of; the template's roles may pull from the account's
``fleetcast-*`` repositories alone. ``fleetcast-processing:latest`` (the old default) is
a Docker Hub name: every job would fail at its start, minutes after the upload.

The parts, from botocore's ECR model (``RepositoryName``: 2 to 256 characters,
``[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*(\\/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*``) and the
registry's host name (``<account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]``, ECR's
"Private registry" page). A tag or a digest is required: ``make images`` pushes immutable
tags named for a commit, so a URI without one (Docker's implicit ``latest``) names no
particular build.
"""

from __future__ import annotations

import re

_REGISTRY = r"[0-9]{12}\.dkr\.ecr(-fips)?\.[a-z]{2,4}(-[a-z]+)+-[0-9]\.amazonaws\.com(\.cn)?"
_REPOSITORY = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
# Docker's tag grammar: a word character, then up to 127 of word characters, '.' and '-'.
_TAG_OR_DIGEST = r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})"
ECR_IMAGE_URI_PATTERN = f"^{_REGISTRY}/{_REPOSITORY}{_TAG_OR_DIGEST}$"
# A parameter of the template may be left empty until the images are pushed (the first
# deploy of an account has none yet): the stack deploys, and what needs an image waits.
OPTIONAL_ECR_IMAGE_URI_PATTERN = f"^$|{ECR_IMAGE_URI_PATTERN}"
ECR_IMAGE_URI_DESCRIPTION = (
    "must be an ECR image URI with a tag or digest, such as "
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:0a1b2c3d4e5f "
    "(`make images` pushes the images and writes their URIs to samconfig.toml), "
    "or empty until the images are pushed"
)
_ECR_IMAGE_URI = re.compile(ECR_IMAGE_URI_PATTERN)


class MissingImageError(ValueError):
    """A job was to start, but the stack was deployed without its image."""

    def __init__(self, parameter: str) -> None:
        super().__init__(
            f"this stack has no {parameter} yet: push the images (`make images`), then "
            "`sam deploy` again (README: Deploy to AWS). The event is retried, then "
            "dead-lettered; replay it once the image is deployed."
        )


def is_ecr_image_uri(uri: str) -> bool:
    return _ECR_IMAGE_URI.fullmatch(uri) is not None


def checked_image_uri(uri: str, parameter: str) -> str:
    """``uri`` when it is an ECR image URI; else why not, naming the template parameter."""
    if uri == "":
        raise MissingImageError(parameter)
    if not is_ecr_image_uri(uri):
        raise ValueError(f"{parameter}={uri!r} {ECR_IMAGE_URI_DESCRIPTION}")
    return uri
