"""``fleetcast images`` (``make images``): build the processing, training and inference
images, push them to ECR and write their URIs into samconfig.toml, where ``sam deploy``
reads them as template parameters.

- One ECR repository per image, ``fleetcast-<family>``, created when missing with
  immutable tags (a tag names one build, so a stack can never change image under the same
  URI), scan on push and AES-256 encryption. The template's SageMaker roles may pull from
  exactly these repositories.
- The tag is the commit's short hash: what ships is a commit. A work tree with changes
  to what the images copy is refused unless ``--tag`` names the build; a tag already in
  the repository is not built again.
- ``docker build`` runs from the repository root (the images copy ``layers/common`` and
  ``requirements/lock.txt``), for linux/amd64 (the ml.* instances), with BuildKit so each
  image's ``Dockerfile.dockerignore`` applies, and pushes what it built itself.
- SageMaker takes only a single-platform Docker image manifest (schema 2): it refuses an
  OCI manifest or an image index ("Unsupported manifest media type"), which is what
  Docker Engine 29's containerd image store pushes by default, with provenance
  attestations. So the build asks for no attestation and Docker media types, and every
  image's manifest in ECR (built now or before) is read back and checked before
  samconfig.toml names it.
- ``--dry-run`` only reads: it prints the docker commands and the samconfig.toml change.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetcast.embedded.info import repo_root
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.images import ECR_IMAGE_URI_DESCRIPTION, is_ecr_image_uri

FAMILIES = ("processing", "training", "inference")
# The template parameter each image's URI goes to.
PARAMETERS = {
    "processing": "ProcessingImageUri",
    "training": "TrainingImageUri",
    "inference": "InferenceImageUri",
}
# What the images copy: a change here makes a new image.
IMAGE_INPUTS = ("containers", "layers/common", "requirements/lock.txt")
PLATFORM = "linux/amd64"
# The one manifest media type SageMaker's CreateModel and job APIs take.
DOCKER_MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


class ImagesError(Exception):
    """A problem the user can fix; printed without a traceback."""


def repository_name(family: str) -> str:
    """The local stack maps ``…/fleetcast-<family>:<tag>`` back to containers/<family>."""
    return f"fleetcast-{family}"


@dataclass(frozen=True)
class Image:
    family: str
    repository_uri: str
    tag: str

    @property
    def uri(self) -> str:
        return f"{self.repository_uri}:{self.tag}"

    @property
    def dockerfile(self) -> str:
        return f"containers/{self.family}/Dockerfile"


# ---------------------------------------------------------------- ECR


def existing_repository_uri(ecr: Any, name: str) -> str | None:
    try:
        described = ecr.describe_repositories(repositoryNames=[name])
    except Exception as error:
        if error_code(error) == "RepositoryNotFoundException":
            return None
        raise
    uri: str = described["repositories"][0]["repositoryUri"]
    return uri


def ensure_repository(ecr: Any, name: str) -> str:
    """The repository's URI, creating the repository first if it does not exist."""
    uri = existing_repository_uri(ecr, name)
    if uri is not None:
        return uri
    created = ecr.create_repository(
        repositoryName=name,
        imageTagMutability="IMMUTABLE",
        imageScanningConfiguration={"scanOnPush": True},
        encryptionConfiguration={"encryptionType": "AES256"},
        tags=[{"Key": "project", "Value": "fleetcast"}],
    )
    created_uri: str = created["repository"]["repositoryUri"]
    return created_uri


def image_exists(ecr: Any, name: str, tag: str) -> bool:
    try:
        ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": tag}])
    except Exception as error:
        if error_code(error) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return False
        raise
    return True


def registry_login(ecr: Any) -> tuple[str, str, str]:
    """(registry, user name, password) for ``docker login``, valid for 12 hours."""
    (authorization,) = ecr.get_authorization_token()["authorizationData"]
    user, _, password = (
        base64.b64decode(authorization["authorizationToken"]).decode().partition(":")
    )
    return authorization["proxyEndpoint"], user, password


# ---------------------------------------------------------------- docker


def build_command(docker: str, image: Image) -> list[str]:
    """Build and push in one: BuildKit's registry exporter with Docker media types and
    no provenance or SBOM attestation, so the tag names a single-platform Docker v2
    manifest whichever image store the engine uses (pushing from the containerd store
    afterwards would push its OCI index)."""
    return [
        docker,
        "build",
        "--platform",
        PLATFORM,
        "--provenance=false",
        "--sbom=false",
        "--output",
        "type=registry,oci-mediatypes=false",
        "--file",
        image.dockerfile,
        "--tag",
        image.uri,
        ".",
    ]


def inspect_command(docker: str, image: Image) -> list[str]:
    """The manifest the registry holds for the tag, as it holds it."""
    return [docker, "buildx", "imagetools", "inspect", "--raw", image.uri]


def manifest_problem(manifest_text: str) -> str | None:
    """Why SageMaker would refuse the image of this manifest, or None."""
    try:
        manifest = json.loads(manifest_text)
    except json.JSONDecodeError:
        return "its manifest could not be read"
    media_type = manifest.get("mediaType") if isinstance(manifest, dict) else None
    if media_type == DOCKER_MANIFEST_V2:
        return None
    return (
        f"its manifest's media type is {media_type or 'not given (an OCI manifest)'}; "
        f"SageMaker takes only {DOCKER_MANIFEST_V2} (one platform, no attestations)"
    )


def login_command(docker: str, registry: str, user: str) -> list[str]:
    # The password goes on standard input, never on the command line.
    return [docker, "login", "--username", user, "--password-stdin", registry]


def _run(command: list[str], root: Path, stdin: str | None = None, *, capture: bool = False) -> str:
    print(f"$ {shlex.join(command)}", flush=True)
    result = subprocess.run(
        command,
        cwd=root,
        input=stdin,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        stdout=subprocess.PIPE if capture else None,
        check=False,
    )
    if result.returncode != 0:
        raise ImagesError(f"`{shlex.join(command[:2])}` failed with exit code {result.returncode}")
    return result.stdout or ""


# ---------------------------------------------------------------- samconfig.toml


def write_image_uris(samconfig: Path, config_env: str, uris: dict[str, str]) -> None:
    """Set ``Parameter=URI`` in the environment's ``parameter_overrides``: replace the
    parameter's entry where it is, else append it. Comments and layout elsewhere stay."""
    import tomlkit

    document = tomlkit.parse(samconfig.read_text())
    try:
        parameters = document[config_env]["deploy"]["parameters"]
    except KeyError as error:
        raise ImagesError(
            f"{samconfig} has no [{config_env}.deploy.parameters] table to write the image URIs to"
        ) from error
    current = parameters.get("parameter_overrides", [])
    entries = current.split() if isinstance(current, str) else [str(e) for e in current]
    for parameter, uri in uris.items():
        entry = f"{parameter}={uri}"
        names = [e.split("=", 1)[0] for e in entries]
        if parameter in names:
            entries[names.index(parameter)] = entry
        else:
            entries.append(entry)
    if isinstance(current, str):
        parameters["parameter_overrides"] = " ".join(entries)
    else:
        # One entry a line, as sam deploy --guided writes them.
        array = tomlkit.array()
        array.extend(entries)
        parameters["parameter_overrides"] = array.multiline(True)
    samconfig.write_text(tomlkit.dumps(document))


def samconfig_region(samconfig: Path, config_env: str) -> str | None:
    import tomlkit

    document = tomlkit.parse(samconfig.read_text())
    for command in ("deploy", "global"):
        region = document.get(config_env, {}).get(command, {}).get("parameters", {}).get("region")
        if region:
            return str(region)
    return None


# ---------------------------------------------------------------- git


def commit_tag(root: Path) -> str:
    """The short commit hash; refused when the images' inputs have uncommitted changes."""
    try:
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", *IMAGE_INPUTS],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as error:
        raise ImagesError(f"cannot name the build from git ({error}): pass --tag") from error
    if changed:
        raise ImagesError(
            "the images' inputs have uncommitted changes, so the commit does not name what "
            f"would be built:\n{changed}\ncommit them, or pass --tag to name this build"
        )
    return commit


# ---------------------------------------------------------------- the command


def publish_images(
    *,
    root: Path,
    samconfig: Path,
    config_env: str,
    tag: str,
    ecr: Any,
    docker: str = "docker",
    dry_run: bool = False,
    families: Sequence[str] = FAMILIES,
) -> dict[str, str]:
    """Build and push each image whose tag is not in its repository yet, then write all
    their URIs to samconfig.toml. Returns parameter -> image URI."""
    images = []
    for family in families:
        name = repository_name(family)
        uri = existing_repository_uri(ecr, name)
        if uri is None and dry_run:
            import boto3

            account = boto3.client("sts", region_name=ecr.meta.region_name).get_caller_identity()
            uri = f"{account['Account']}.dkr.ecr.{ecr.meta.region_name}.amazonaws.com/{name}"
            print(f"would create the ECR repository {name}")
        elif uri is None:
            uri = ensure_repository(ecr, name)
            print(f"created the ECR repository {name}: immutable tags, scan on push")
        images.append(Image(family, uri, tag))
    # The template's parameters refuse anything else; better said before a build.
    for image in images:
        if not is_ecr_image_uri(image.uri):
            raise ImagesError(f"{image.uri!r} {ECR_IMAGE_URI_DESCRIPTION.split(' (')[0]}")

    to_build = [i for i in images if not image_exists(ecr, repository_name(i.family), tag)]
    for image in images:
        if image not in to_build:
            print(f"{image.uri} is in ECR already: not built again")
    # Logged in for the builds' pushes and for reading every manifest back.
    if dry_run:
        registry = f"https://{images[0].repository_uri.split('/', 1)[0]}"
        print(f"$ {shlex.join(login_command(docker, registry, 'AWS'))}")
    else:
        registry, user, password = registry_login(ecr)
        _run(login_command(docker, registry, user), root, stdin=password)
    for image in to_build:
        if dry_run:
            print(f"$ {shlex.join(build_command(docker, image))}")
        else:
            _run(build_command(docker, image), root)
    refused = []
    for image in images:
        if dry_run:
            print(f"$ {shlex.join(inspect_command(docker, image))}")
            continue
        problem = manifest_problem(_run(inspect_command(docker, image), root, capture=True))
        if problem:
            refused.append(f"{image.uri}: {problem}")
    if refused:
        raise ImagesError(
            "SageMaker would refuse these images, so samconfig.toml is left as it was:\n  "
            + "\n  ".join(refused)
            + "\nbuild them again with a new --tag (the repositories' tags are immutable) "
            "using `docker build --provenance=false --output type=registry,oci-mediatypes=false`"
        )

    uris = {PARAMETERS[i.family]: i.uri for i in images}
    if dry_run:
        print(f"would set in {samconfig.name} [{config_env}.deploy.parameters]:")
    else:
        write_image_uris(samconfig, config_env, uris)
        print(f"set in {samconfig.name} [{config_env}.deploy.parameters]:")
    for parameter, uri in uris.items():
        print(f"  {parameter}={uri}")
    return uris


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetcast images", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-env",
        default="default",
        help="samconfig.toml environment to write the URIs to, as `sam deploy --config-env`",
    )
    parser.add_argument(
        "--region", help="ECR region (default: that environment's deploy region in samconfig)"
    )
    parser.add_argument("--tag", help="image tag (default: the commit's short hash)")
    parser.add_argument(
        "--docker", default=os.environ.get("DOCKER", "docker"), help="the docker client to run"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="only read: print the docker commands and the samconfig.toml change",
    )
    parser.add_argument(
        "--only", choices=FAMILIES, action="append", help="build only this image (repeatable)"
    )
    parser.add_argument("--samconfig", type=Path, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    # boto3 and tomlkit are imported where used: `fleetcast --help` builds this parser.
    import boto3

    root = repo_root()
    samconfig = args.samconfig or root / "samconfig.toml"
    try:
        region = (
            args.region
            or samconfig_region(samconfig, args.config_env)
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
        )
        if not region:
            raise ImagesError("no region: pass --region or set one in samconfig.toml")
        publish_images(
            root=root,
            samconfig=samconfig,
            config_env=args.config_env,
            tag=args.tag or commit_tag(root),
            ecr=boto3.client("ecr", region_name=region),
            docker=args.docker,
            dry_run=args.dry_run,
            families=args.only or FAMILIES,
        )
    except ImagesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
