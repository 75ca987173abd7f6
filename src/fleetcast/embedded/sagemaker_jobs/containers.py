"""A job's container as a local process: its command from the Dockerfile that builds the
image, how a killed instance is told, what its message and log files say."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

# What SageMaker keeps of a FailureReason.
FAILURE_REASON_LIMIT = 1024
_ENTRYPOINT = re.compile(r"^\s*ENTRYPOINT\s+(\[.*\])\s*$", re.MULTILINE)
_ENV = re.compile(r"^\s*ENV\s+(.*)$", re.MULTILINE)
_CONTINUED = re.compile(r"\\\n")
_COMMENT = re.compile(r"^\s*#")


def image_entrypoint(image_uri: str, containers_dir: Path) -> list[str]:
    """The ENTRYPOINT of the Dockerfile that builds ``image_uri`` (``…/fleetcast-training:tag``
    is built from ``containers/training/Dockerfile``), so the local stack runs what ships."""
    dockerfile = image_dockerfile(image_uri, containers_dir)
    found = _ENTRYPOINT.findall(dockerfile.read_text())
    if not found:
        raise LookupError(f"{dockerfile} has no exec-form ENTRYPOINT")
    command: list[str] = json.loads(found[-1])
    return command


# What the image's ENV says of the image alone: where its code is copied to, and that its
# code is read-only (no bytecode written beside it). The local stack runs the checkout's
# code, from its own paths.
IMAGE_ONLY_ENV = frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE"})


def image_environment(image_uri: str, containers_dir: Path) -> dict[str, str]:
    """The ENV of the Dockerfile that builds ``image_uri`` (``KEY=value`` pairs, lines
    continued with a backslash, comment lines skipped), but for :data:`IMAGE_ONLY_ENV`:
    what the container's process runs with (one BLAS and OpenMP thread per process, say),
    so a local instance costs what a deployed one does."""
    dockerfile = image_dockerfile(image_uri, containers_dir)
    lines = [line for line in dockerfile.read_text().splitlines() if not _COMMENT.match(line)]
    text = _CONTINUED.sub(" ", "\n".join(lines))
    environment: dict[str, str] = {}
    for payload in _ENV.findall(text):
        for pair in shlex.split(payload):
            key, equals, value = pair.partition("=")
            if not equals:
                raise LookupError(f"{dockerfile}: ENV {payload.strip()!r} is not KEY=value pairs")
            if key not in IMAGE_ONLY_ENV:
                environment[key] = value
    return environment


def image_dockerfile(image_uri: str, containers_dir: Path) -> Path:
    """The Dockerfile that builds ``image_uri``: ``containers/<family>/Dockerfile`` for
    ``…/fleetcast-<family>:tag``."""
    repository = image_uri.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    family = repository.removeprefix("fleetcast-")
    dockerfile = containers_dir / family / "Dockerfile"
    if not dockerfile.is_file():
        raise LookupError(
            f"the local stack has no container for image {image_uri!r} (looked for {dockerfile})"
        )
    return dockerfile


# A folder of the images' own environments (fleetcast.image_environments): when set, a
# container's ``python3 -m fleetcast_<family>`` runs with its image's interpreter, which
# has only what the Dockerfile installs and copies, not this development environment.
IMAGE_ENVIRONMENTS_ENV = "FLEETCAST_IMAGE_ENVIRONMENTS"
_FAMILY_MODULE = re.compile(r"fleetcast_(\w+)")


def local_command(command: list[str]) -> list[str]:
    """Run a container's ``python3 …`` command with this environment's interpreter, or
    with its image's own (``FLEETCAST_IMAGE_ENVIRONMENTS``)."""
    if not command or Path(command[0]).name not in ("python", "python3"):
        return command
    python = sys.executable
    images = os.environ.get(IMAGE_ENVIRONMENTS_ENV)
    module = command[command.index("-m") + 1] if "-m" in command[:-1] else ""
    family = _FAMILY_MODULE.fullmatch(module)
    if images and family:
        own = Path(images) / family.group(1) / "venv" / "bin" / "python"
        if not own.is_file():
            raise LookupError(f"{IMAGE_ENVIRONMENTS_ENV}={images} has no environment {own}")
        python = str(own)
    return [python, *command[1:]]


def kill_instance(process: subprocess.Popen[bytes]) -> None:
    """Stop an emulated instance at once, as losing a spot instance does."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def hold_instance(pid: int, *, held: bool) -> None:
    """Hold an emulated instance still (stop its process group), or let it go on."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGSTOP if held else signal.SIGCONT)


def killed_reason(returncode: int) -> str | None:
    """What a container killed by a signal leaves SageMaker to say (no failure file)."""
    if returncode >= 0:
        return None
    name = signal.Signals(-returncode).name
    cause = ", as when the instance runs out of memory" if name == "SIGKILL" else ""
    return f"the training container was killed by {name} (exit code {128 - returncode}){cause}"


def read_limited(path: Path, limit: int) -> str | None:
    """The first ``limit`` characters of a contract's message file, as SageMaker keeps them."""
    if not path.is_file():
        return None
    return path.read_text(errors="replace")[:limit].strip() or None


def log_tail(path: Path, lines: int = 3) -> str | None:
    if not path.is_file():
        return None
    content = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(content[-lines:])[:FAILURE_REASON_LIMIT] or None
