"""``fleetcast images`` (``make images``) against ECR on a moto server.

No image can be built here (no Docker engine), so ``--docker`` points at a stand-in
client that records its arguments, working folder and standard input: the ECR side, the
docker commands and the samconfig.toml edit are all real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import boto3
import pytest
from template_helpers import REPO_ROOT, load_template

from fleetcast import images
from fleetcast.embedded.sagemaker_jobs.containers import image_entrypoint

ACCOUNT = "123456789012"  # moto's
REGISTRY = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
# The roles that pull each image, and the statement that lets them.
PULLING_ROLE = {
    "processing": "SageMakerExecutionRole",
    "training": "SageMakerExecutionRole",
    "inference": "InferenceExecutionRole",
}


DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"
# What Docker Engine 29's containerd image store pushes by default: an OCI index holding
# the image and its provenance attestation.
OCI_INDEX = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "platform": {"architecture": "amd64", "os": "linux"},
        },
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "platform": {"architecture": "unknown", "os": "unknown"},
            "annotations": {"vnd.docker.reference.type": "attestation-manifest"},
        },
    ],
}


@pytest.fixture
def docker(tmp_path: Path) -> dict[str, Path]:
    """A stand-in docker client: one line per call, "<cwd> <args>"; login's stdin apart;
    ``buildx imagetools inspect --raw`` prints the manifest file (a Docker v2 manifest
    unless a test writes another)."""
    log, password = tmp_path / "docker.log", tmp_path / "docker.password"
    manifest = tmp_path / "docker.manifest"
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2}))
    script = tmp_path / "docker"
    script.write_text(
        f'#!/bin/sh\necho "$(pwd) $*" >> {log}\n'
        f'if [ "$1" = login ]; then cat > {password}; fi\n'
        f'if [ "$1 $2 $3" = "buildx imagetools inspect" ]; then cat {manifest}; fi\n'
    )
    script.chmod(0o755)
    return {"client": script, "log": log, "password": password, "manifest": manifest}


@pytest.fixture
def samconfig(tmp_path: Path) -> Path:
    copy = tmp_path / "samconfig.toml"
    shutil.copy2(REPO_ROOT / "samconfig.toml", copy)
    return copy


def _calls(docker: dict[str, Path]) -> list[list[str]]:
    if not docker["log"].exists():
        return []
    return [line.split() for line in docker["log"].read_text().splitlines()]


def _overrides(samconfig: Path, environment: str) -> dict[str, str]:
    pairs = tomllib.loads(samconfig.read_text())[environment]["deploy"]["parameters"][
        "parameter_overrides"
    ]
    return dict(pair.split("=", 1) for pair in pairs)


def _publish(samconfig: Path, docker: dict[str, Path], *extra: str) -> int:
    return images.main(
        [
            "--samconfig",
            str(samconfig),
            "--docker",
            str(docker["client"]),
            "--region",
            "us-east-1",
            *extra,
        ]
    )


def test_images_creates_the_repositories_pushes_and_writes_the_uris(
    aws_env: str, samconfig: Path, docker: dict[str, Path]
) -> None:
    # Given samconfig.toml as committed
    before = tomllib.loads(samconfig.read_text())
    # When the images are published for the default environment
    assert _publish(samconfig, docker, "--tag", "abc1234") == 0
    # Then each repository exists with immutable tags and scan on push
    ecr = boto3.client("ecr")
    repositories = {
        r["repositoryName"]: r
        for r in ecr.describe_repositories(
            repositoryNames=[images.repository_name(f) for f in images.FAMILIES]
        )["repositories"]
    }
    for repository in repositories.values():
        assert repository["imageTagMutability"] == "IMMUTABLE"
        assert repository["imageScanningConfiguration"] == {"scanOnPush": True}
    # And docker logged in with ECR's token on stdin, then built and pushed each image
    # from the repository root, as one platform's Docker v2 manifest without attestations,
    # then read each manifest back
    token = ecr.get_authorization_token()["authorizationData"][0]
    login, *builds = _calls(docker)
    assert login == [
        str(REPO_ROOT),
        "login",
        "--username",
        "AWS",
        "--password-stdin",
        token["proxyEndpoint"],
    ]
    assert docker["password"].read_text() == images.registry_login(ecr)[2]
    expected = []
    for family in images.FAMILIES:
        uri = f"{REGISTRY}/fleetcast-{family}:abc1234"
        dockerfile = f"containers/{family}/Dockerfile"
        expected.append(
            [
                str(REPO_ROOT),
                "build",
                "--platform",
                "linux/amd64",
                "--provenance=false",
                "--sbom=false",
                "--output",
                "type=registry,oci-mediatypes=false",
                "--file",
                dockerfile,
                "--tag",
                uri,
                ".",
            ]
        )
    for family in images.FAMILIES:
        uri = f"{REGISTRY}/fleetcast-{family}:abc1234"
        expected.append([str(REPO_ROOT), "buildx", "imagetools", "inspect", "--raw", uri])
    assert builds == expected
    # And samconfig's default environment names the images; nothing else changed
    after = tomllib.loads(samconfig.read_text())
    overrides = _overrides(samconfig, "default")
    assert {k: v for k, v in overrides.items() if k.endswith("ImageUri")} == {
        "ProcessingImageUri": f"{REGISTRY}/fleetcast-processing:abc1234",
        "TrainingImageUri": f"{REGISTRY}/fleetcast-training:abc1234",
        "InferenceImageUri": f"{REGISTRY}/fleetcast-inference:abc1234",
    }
    assert {k: v for k, v in overrides.items() if not k.endswith("ImageUri")} == _overrides(
        REPO_ROOT / "samconfig.toml", "default"
    )
    after["default"]["deploy"]["parameters"].pop("parameter_overrides")
    before["default"]["deploy"]["parameters"].pop("parameter_overrides")
    assert after == before
    # And the comments that explain the file are still there
    assert samconfig.read_text().startswith((REPO_ROOT / "samconfig.toml").read_text()[:200])


def test_the_uris_are_what_the_roles_may_pull_and_what_the_local_stack_runs(
    aws_env: str, samconfig: Path, docker: dict[str, Path]
) -> None:
    assert _publish(samconfig, docker, "--tag", "roles12") == 0
    overrides = _overrides(samconfig, "default")
    resources = load_template()["Resources"]
    for family in images.FAMILIES:
        uri = overrides[images.PARAMETERS[family]]
        repository = uri.split("/", 1)[1].split(":", 1)[0]
        # The role that pulls it may pull from exactly this repository
        role = resources[PULLING_ROLE[family]]["Properties"]["Policies"][0]["PolicyDocument"]
        (pull,) = (s for s in role["Statement"] if s.get("Sid") == "EcrPull")
        resources_allowed = (
            pull["Resource"] if isinstance(pull["Resource"], list) else [pull["Resource"]]
        )
        assert any(r["Fn::Sub"].endswith(f":repository/{repository}") for r in resources_allowed)
        # And the local stack maps it back to the Dockerfile it was built from
        dockerfile = (REPO_ROOT / "containers" / family / "Dockerfile").read_text()
        entrypoint = image_entrypoint(uri, REPO_ROOT / "containers")
        assert f"ENTRYPOINT {json.dumps(entrypoint)}" in dockerfile


def test_an_image_already_in_ecr_is_not_built_again(
    aws_env: str, samconfig: Path, docker: dict[str, Path]
) -> None:
    # Given the processing image of this tag pushed before
    ecr = boto3.client("ecr")
    images.ensure_repository(ecr, "fleetcast-processing")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    }
    ecr.put_image(
        repositoryName="fleetcast-processing",
        imageManifest=json.dumps(manifest),
        imageTag="again12",
    )
    # When the images are published with that tag
    assert _publish(samconfig, docker, "--tag", "again12") == 0
    # Then only the other two are built, all three manifests are checked, and all three
    # URIs are written
    built = {call[call.index("--file") + 1] for call in _calls(docker) if call[1] == "build"}
    assert built == {"containers/training/Dockerfile", "containers/inference/Dockerfile"}
    inspected = {c[-1] for c in _calls(docker) if c[1:4] == ["buildx", "imagetools", "inspect"]}
    assert inspected == {f"{REGISTRY}/fleetcast-{family}:again12" for family in images.FAMILIES}
    assert _overrides(samconfig, "default")["ProcessingImageUri"].endswith(
        "/fleetcast-processing:again12"
    )


def test_dry_run_only_reads(
    aws_env: str, samconfig: Path, docker: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a region where no repository exists yet
    committed = samconfig.read_text()
    # When the images are published there as a dry run
    assert (
        _publish(samconfig, docker, "--tag", "dry1234", "--region", "eu-west-1", "--dry-run") == 0
    )
    # Then the docker commands are printed, none is run, no repository is created and
    # samconfig.toml is unchanged
    printed = capsys.readouterr().out
    uri = f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/fleetcast-training:dry1234"
    assert (
        "build --platform linux/amd64 --provenance=false --sbom=false "
        "--output type=registry,oci-mediatypes=false "
        f"--file containers/training/Dockerfile --tag {uri} ." in printed
    )
    assert f"buildx imagetools inspect --raw {uri}" in printed
    assert f"TrainingImageUri={uri}" in printed
    assert _calls(docker) == []
    assert (
        boto3.client("ecr", region_name="eu-west-1").describe_repositories()["repositories"] == []
    )
    assert samconfig.read_text() == committed


def test_prod_gets_its_own_uris(aws_env: str, samconfig: Path, docker: dict[str, Path]) -> None:
    assert _publish(samconfig, docker, "--tag", "prod123", "--config-env", "prod") == 0
    assert _overrides(samconfig, "prod")["InferenceImageUri"].endswith(":prod123")
    assert "InferenceImageUri" not in _overrides(samconfig, "default")


def _git(repository: Path, *arguments: str) -> Any:
    return subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *arguments],
        cwd=repository,
        check=True,
        capture_output=True,
        text=True,
    )


def test_the_tag_is_the_commit_and_uncommitted_image_inputs_are_refused(tmp_path: Path) -> None:
    # Given a checkout with a committed Dockerfile
    (tmp_path / "containers" / "training").mkdir(parents=True)
    dockerfile = tmp_path / "containers" / "training" / "Dockerfile"
    dockerfile.write_text("FROM python:3.11.14-slim-bookworm\n")
    (tmp_path / "README.md").write_text("readme\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "images")
    commit = _git(tmp_path, "rev-parse", "--short=12", "HEAD").stdout.strip()
    # Then a clean tree is tagged with its commit; a change outside the images is fine
    (tmp_path / "README.md").write_text("changed\n")
    assert images.commit_tag(tmp_path) == commit
    # But a change to what an image copies is refused
    dockerfile.write_text("FROM python:3.11.14-slim-bookworm\nUSER 1000\n")
    with pytest.raises(images.ImagesError, match="uncommitted changes"):
        images.commit_tag(tmp_path)


def test_a_tag_that_makes_no_ecr_uri_is_refused_before_any_build(
    aws_env: str, samconfig: Path, docker: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a build named with something Docker cannot take as a tag
    committed = samconfig.read_text()
    # When the images are published under it
    assert _publish(samconfig, docker, "--tag", "my build") == 2
    # Then nothing is built or written, and the user is told what an image URI must be
    assert "must be an ECR image URI with a tag or digest" in capsys.readouterr().err
    assert _calls(docker) == []
    assert samconfig.read_text() == committed


@pytest.mark.parametrize(
    "manifest",
    [
        OCI_INDEX,
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"},
        # An OCI manifest may leave its media type out.
        {"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json"}},
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
        },
    ],
    ids=["oci-index-with-attestation", "oci-manifest", "oci-manifest-untyped", "docker-list"],
)
def test_an_image_sagemaker_would_refuse_is_never_written_to_samconfig(
    aws_env: str,
    samconfig: Path,
    docker: dict[str, Path],
    manifest: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a registry that holds what an engine with the containerd image store pushed
    committed = samconfig.read_text()
    docker["manifest"].write_text(json.dumps(manifest))
    # When the images are published
    assert _publish(samconfig, docker, "--tag", "oci1234") == 2
    # Then each image's manifest was read back, samconfig.toml is unchanged, and the user
    # is told why and what to do
    inspected = [c[-1] for c in _calls(docker) if c[1:4] == ["buildx", "imagetools", "inspect"]]
    assert len(inspected) == len(images.FAMILIES)
    assert samconfig.read_text() == committed
    error = capsys.readouterr().err
    assert "SageMaker would refuse" in error
    assert f"{REGISTRY}/fleetcast-training:oci1234" in error
    assert DOCKER_V2 in error
    assert "new --tag" in error
