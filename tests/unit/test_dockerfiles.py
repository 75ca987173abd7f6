"""The three Dockerfiles, read statically (no Docker engine here): what they build is what
the local stack runs and what the template's roles may pull.

The local stack runs each container's ENTRYPOINT from its Dockerfile with this checkout's
interpreter (src/fleetcast/embedded/sagemaker_jobs.py, serving.py), so the link the tests
below hold is: Dockerfile ENTRYPOINT == what the local stack runs == what SageMaker runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from template_helpers import REPO_ROOT

from fleetcast.embedded.sagemaker_jobs.containers import (
    IMAGE_ONLY_ENV,
    image_entrypoint,
    image_environment,
)
from fleetcast.embedded.serving import SERVE_COMMAND
from fleetcast_contracts.processing import ENTRYPOINT as PROCESSING_ENTRYPOINT

CONTAINERS = REPO_ROOT / "containers"
FAMILIES = ("processing", "training", "inference")
HADOLINT = Path(sys.executable).parent / "hadolint"
MME_LABEL = "com.amazonaws.sagemaker.capabilities.multi-models"
LOCK = {
    name.lower(): version
    for name, version in re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO_ROOT / "requirements/lock.txt").read_text(), re.M
    )
}


def instructions(family: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = (CONTAINERS / family / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, arguments = line.strip().partition(" ")
            found.append((instruction.upper(), arguments.strip()))
    return found


def only(family: str, instruction: str) -> list[str]:
    return [arguments for name, arguments in instructions(family) if name == instruction]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_base_image_is_pinned_to_a_patch_release_of_the_projects_python(family: str) -> None:
    (base,) = only(family, "FROM")
    image, _, tag = base.partition(":")
    assert image == "python"
    # The same Python as the project (requires-python) and the Lambda runtime.
    assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), base


@pytest.mark.parametrize("family", FAMILIES)
def test_the_entrypoint_is_the_module_the_local_stack_runs(family: str) -> None:
    (entrypoint,) = only(family, "ENTRYPOINT")
    command = json.loads(entrypoint)  # exec form: no shell between SageMaker and Python
    assert command == ["python3", "-m", f"fleetcast_{family}"]
    assert (CONTAINERS / family / f"fleetcast_{family}" / "__main__.py").is_file()
    # The local stack maps the image back to this Dockerfile and runs the same command.
    assert image_entrypoint(f"{family}.example/fleetcast-{family}:abc", CONTAINERS) == command


@pytest.mark.parametrize("family", FAMILIES)
def test_the_local_stack_runs_a_container_with_its_images_environment(family: str) -> None:
    declared = dict(
        pair.split("=", 1) for arguments in only(family, "ENV") for pair in arguments.split()
    )
    local = image_environment(f"{family}.example/fleetcast-{family}:abc", CONTAINERS)
    # Everything but where the image keeps its code (the local stack runs the checkout's).
    assert local == {k: v for k, v in declared.items() if k not in IMAGE_ONLY_ENV}
    assert "PYTHONPATH" in declared and "PYTHONPATH" not in local
    if family != "processing":
        # The jobs and the server run a process per CPU: one BLAS thread each, locally too.
        assert local["OPENBLAS_NUM_THREADS"] == local["OMP_NUM_THREADS"] == "1"


def test_an_env_line_that_is_not_key_value_pairs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "Dockerfile").write_text(
        "FROM python:3.11.14-slim-bookworm\n# a note\nENV A=1 \\\n    B=two\nENV LEGACY value\n"
    )
    with pytest.raises(LookupError, match="ENV 'LEGACY value' is not KEY=value pairs"):
        image_environment("fleetcast-training:latest", tmp_path)
    (tmp_path / "training" / "Dockerfile").write_text("ENV A=1 \\\n    B='two words'\n")
    assert image_environment("fleetcast-training:latest", tmp_path) == {"A": "1", "B": "two words"}


def test_the_processing_job_request_names_the_images_entrypoint() -> None:
    # CreateProcessingJob overrides the image's ENTRYPOINT with ContainerEntrypoint.
    (entrypoint,) = only("processing", "ENTRYPOINT")
    assert json.loads(entrypoint) == PROCESSING_ENTRYPOINT


def test_the_inference_image_is_a_multi_model_server() -> None:
    labels = " ".join(only("inference", "LABEL"))
    assert f"{MME_LABEL}=true" in labels.split()
    assert "SAGEMAKER_MULTI_MODEL=true" in " ".join(only("inference", "ENV")).split()
    assert only("inference", "EXPOSE") == ["8080"]
    # SageMaker starts a hosting container as `<image> serve`, as the local stack does.
    assert only("inference", "CMD") == [json.dumps([SERVE_COMMAND])]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_image_runs_as_root_as_sagemaker_expects_and_says_so(family: str) -> None:
    # SageMaker mounts /opt/ml root-owned and documents that it expects root; a USER would
    # pass every test here and fail on SageMaker. Each Dockerfile says so where a reader
    # would otherwise add one.
    assert only(family, "USER") == []
    assert not any("useradd" in run for run in only(family, "RUN"))
    assert "as root" in (CONTAINERS / family / "Dockerfile").read_text()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_package_installed_is_pinned_to_the_tested_version(family: str) -> None:
    installs = [r for r in only(family, "RUN") if "pip install" in r]
    assert installs, "no pip install"
    for run in installs:
        assert "--constraint /tmp/lock.txt" in run
        packages = re.findall(r"\s([A-Za-z0-9_.-]+)==(\S+)", run)
        assert packages
        for name, version in packages:
            assert LOCK[name.lower()] == version, name


@pytest.mark.parametrize("family", FAMILIES)
def test_the_image_copies_only_what_its_dockerignore_lets_through(family: str) -> None:
    ignore = (CONTAINERS / family / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore
    sources = [arguments.split()[0] for arguments in only(family, "COPY")]
    assert set(sources) == allowed
    for source in sources:
        assert (REPO_ROOT / source).exists(), source
    # The package of its own family and the contracts, nothing of the other images and
    # nothing of the Lambda functions' code
    assert f"containers/{family}/fleetcast_{family}" in sources
    assert "layers/common/fleetcast_contracts" in sources
    assert "layers/common/fleetcast_common" not in sources


def test_hadolint_passes() -> None:
    if not HADOLINT.exists():
        pytest.skip("hadolint is not installed: run `make install`")
    result = subprocess.run(
        [HADOLINT, *(CONTAINERS / family / "Dockerfile" for family in FAMILIES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _imported_top_modules(package: Path, shared: Path) -> set[str]:
    """Top-level modules imported anywhere (lazily too) by ``package`` and by the
    modules it reaches of the shared package ``shared``."""
    import ast

    seen: set[Path] = set()
    pending = sorted(package.glob("*.py"))
    modules: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                modules.add(name.split(".")[0])
                if name.startswith(f"{shared.name}."):
                    target = shared.parent / (name.replace(".", "/"))
                    pending += [p for p in (target.with_suffix(".py"), target / "__init__.py")]
        pending = [p for p in pending if p.is_file()]
    return modules


def _with_dependencies(names: set[str]) -> set[str]:
    """The distributions and everything they require (extras aside), as installed here."""
    from importlib.metadata import PackageNotFoundError, requires

    found: set[str] = set()
    pending = [name.lower() for name in names]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requirements = requires(name) or []
        except PackageNotFoundError:
            continue
        for requirement in requirements:
            if "extra ==" in requirement:
                continue
            pending.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower())
    return {name.replace("_", "-") for name in found}


def test_the_processing_image_installs_every_library_its_code_imports() -> None:
    # (holidays checks the countries of customer metadata files: a missing install would
    # only show when the first metadata file reached SageMaker)
    from importlib.metadata import packages_distributions

    modules = _imported_top_modules(
        CONTAINERS / "processing" / "fleetcast_processing",
        REPO_ROOT / "layers" / "common" / "fleetcast_contracts",
    )
    third_party = {
        module
        for module in modules
        if module not in sys.stdlib_module_names and not module.startswith("fleetcast")
    }
    installs = " ".join(r for r in only("processing", "RUN") if "pip install" in r)
    installed = _with_dependencies(set(re.findall(r"\s([A-Za-z0-9_.-]+)==", installs)))
    distributions = packages_distributions()
    missing = {
        module
        for module in third_party
        if not {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        & installed
    }
    assert "holidays" in third_party
    assert missing == set()
