"""Each container run from exactly what its Dockerfile installs and copies (issue 27,
"What to build" 4): a local stack whose processing and training jobs and endpoint run in
the images' own environments (fleetcast.image_environments), not in the development
environment that has every package, through a whole run and a forecast.

``make test-images`` runs this file alone; ``make test`` runs it with the other tests of
a stack of their own.
"""

from __future__ import annotations

import ast
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from template_helpers import REPO_ROOT
from test_pipeline import finished, readings, registry, to_csv, upload
from test_serving import get_when_ready

from fleetcast.embedded.sagemaker_jobs.containers import IMAGE_ENVIRONMENTS_ENV, local_command
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.image_environments import FAMILIES, DockerfileImage, build, environment_python
from fleetcast_contracts.stages import PROCESSING, TRAINING

pytestmark = [pytest.mark.e2e, pytest.mark.own_stack, pytest.mark.images]
CUSTOMERS = [f"image-{n}" for n in range(4)]


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("image-environments")
    for family in FAMILIES:
        build(folder, family)
    return folder


@pytest.fixture(scope="module")
def image_stack(
    environments: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedStack]:
    os.environ[IMAGE_ENVIRONMENTS_ENV] = str(environments)
    local = EmbeddedStack(
        state_dir=tmp_path_factory.mktemp("fleetcast-images"),
        port=0,
        parameters={"TrainingInstanceCount": "1"},
    )
    try:
        local.start()
        yield local
        local.stop()
    finally:
        del os.environ[IMAGE_ENVIRONMENTS_ENV]


@pytest.mark.parametrize("family", FAMILIES)
def test_an_images_environment_has_what_its_dockerfile_installs_and_nothing_else(
    environments: Path, family: str
) -> None:
    python = environment_python(environments, family)
    image = DockerfileImage.read(REPO_ROOT / "containers" / family / "Dockerfile")
    # The same Python as the base image, to the minor version
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert image.base.startswith(f"python:{version}.")

    # Its own code and the contracts import; the Lambda functions' code and the
    # development environment's do not
    def imports(module: str) -> bool:
        return subprocess.run([python, "-c", f"import {module}"], check=False).returncode == 0

    assert imports(f"fleetcast_{family}") and imports("fleetcast_contracts")
    assert imports("fleetcast_forecasters") == (family != "processing")
    assert not any(
        imports(m) for m in ("fleetcast", "fleetcast_common", "fleetcast_cost", "moto", "boto3")
    )
    assert not imports("pytest")
    # And the local stack runs the container's ENTRYPOINT with it
    os.environ[IMAGE_ENVIRONMENTS_ENV] = str(environments)
    try:
        assert local_command(list(image.entrypoint))[0] == str(python)
    finally:
        del os.environ[IMAGE_ENVIRONMENTS_ENV]


def test_a_package_the_dockerfile_forgets_is_noticed(tmp_path: Path) -> None:
    # Given the processing Dockerfile without pyarrow, in a copy of the build context
    context = tmp_path / "context"
    for part in ("requirements", "layers", "containers/processing/fleetcast_processing"):
        (context / part).parent.mkdir(parents=True, exist_ok=True)
        (context / part).symlink_to(REPO_ROOT / part)
    dockerfile = (REPO_ROOT / "containers/processing/Dockerfile").read_text()
    assert "pyarrow==" in dockerfile
    (context / "containers/processing/Dockerfile").write_text(
        "\n".join(line for line in dockerfile.splitlines() if "pyarrow==" not in line)
    )
    # When its environment is built and its entrypoint started
    python = build(tmp_path / "environments", "processing", root=context)
    started = subprocess.run(
        [python, "-m", "fleetcast_processing", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    # Then it fails as the image would, naming the package
    assert started.returncode != 0
    assert "No module named 'pyarrow'" in started.stderr


def test_a_run_and_a_forecast_with_every_container_in_its_own_environment(
    image_stack: EmbeddedStack,
) -> None:
    assert image_stack.info is not None
    run_id = upload(
        image_stack, "images.csv", to_csv(readings(CUSTOMERS, "2023-01-01", 400, seed=3))
    )
    status = finished(image_stack, run_id)
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert status.job(TRAINING).status == "Completed", status.job(TRAINING).failure
    assert status.customers_registered == len(CUSTOMERS)
    assert all(registry(image_stack).live(c) is not None for c in CUSTOMERS)
    status_code, _, body = get_when_ready(
        image_stack.info.environment(), f"/customers/{CUSTOMERS[0]}/forecast?period=7"
    )
    assert status_code == 200, body
    assert len(body["forecast"]) == 7


def _module_files(root: Path, name: str) -> list[Path]:
    target = root.joinpath(*name.split("."))
    return [m for m in (target.with_suffix(".py"), target / "__init__.py") if m.is_file()]


def _reached(family: str) -> tuple[set[Path], set[str]]:
    """The files of its image's packages that the family's code reaches, directly or through
    others (an import anywhere in a module, or a module named in a string, as
    ``fleetcast_forecasters.families`` names its families for ``importlib``), and every
    first-party package it imports."""
    image = DockerfileImage.read(REPO_ROOT / "containers" / family / "Dockerfile")
    copied = {Path(source).name: REPO_ROOT / source for source, _ in image.copies}
    pending = sorted(copied[f"fleetcast_{family}"].rglob("*.py"))
    reached: set[Path] = set()
    imported: set[str] = set()
    while pending:
        path = pending.pop()
        if path in reached:
            continue
        reached.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                top = node.value.split(".")[0]
                if top in copied and _module_files(copied[top].parent, node.value):
                    names = [node.value]
            for name in names:
                parts = name.split(".")
                if not parts[0].startswith("fleetcast"):
                    continue
                imported.add(parts[0])
                if parts[0] not in copied:
                    continue
                for depth in range(1, len(parts) + 1):
                    module = ".".join(parts[:depth])
                    pending += _module_files(copied[parts[0]].parent, module)
    return reached, imported


@pytest.mark.parametrize("family", FAMILIES)
def test_each_image_copies_only_the_packages_and_modules_its_code_reaches(family: str) -> None:
    image = DockerfileImage.read(REPO_ROOT / "containers" / family / "Dockerfile")
    packages = {
        Path(source).name: REPO_ROOT / source
        for source, _ in image.copies
        if (REPO_ROOT / source).is_dir()
    }
    reached, imported = _reached(family)
    # Every first-party package its code imports is copied, and no other: never the Lambda
    # functions' fleetcast_common
    assert imported == set(packages)
    assert "fleetcast_common" not in packages
    # And of each package but the contracts (the vocabulary every process shares, of
    # which each reads its part), every module copied is one its code reaches
    copied = {
        path
        for name, folder in packages.items()
        if name != "fleetcast_contracts"
        for path in folder.rglob("*.py")
    }
    assert sorted(str(p.relative_to(REPO_ROOT)) for p in copied - reached) == []


def test_the_reach_check_sees_what_an_image_does_not_need() -> None:
    # The processing image reaches only part of the contracts (no model archive), and
    # imports no model family, so a copy of the forecasters would fail the check above
    reached, imported = _reached("processing")
    names = {p.name for p in reached}
    assert {"processing.py", "layout.py"} <= names
    assert "model_archive.py" not in names
    assert imported == {"fleetcast_processing", "fleetcast_contracts"}
