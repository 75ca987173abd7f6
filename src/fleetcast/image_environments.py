"""Each container's own Python environment, built from exactly what its Dockerfile puts in
the image, for the local stack to run the container in (issue 27, "What to build" 4).

The local stack runs a job's or the endpoint's ENTRYPOINT with the development
environment's interpreter, where every package of the project is installed: a package a
Dockerfile forgets, or a module its ``COPY`` leaves out, is never noticed there. Here a
virtual environment per image gets the Dockerfile's ``pip install`` (its packages, under
the same ``--constraint`` lock) and nothing else, and the trees its ``COPY`` lines put on
its ``PYTHONPATH`` (a ``.pth`` file stands for the ``ENV PYTHONPATH``). With
``FLEETCAST_IMAGE_ENVIRONMENTS`` naming the folder they were built in, the local stack
runs each container with its image's interpreter
(:func:`fleetcast.embedded.sagemaker_jobs.containers.local_command`).

No Docker here: the base image's Python is this machine's (the Dockerfiles' ``FROM``
must be the same minor version, which a test holds), and the packages come from uv's
cache (``--offline``) as ``make install`` left them.

    python -m fleetcast.image_environments FOLDER [FAMILY ...]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetcast.embedded.sagemaker_jobs.containers import IMAGE_ENVIRONMENTS_ENV
from fleetcast.embedded.stack import repo_root

FAMILIES = ("processing", "training", "inference")


@dataclass(frozen=True)
class DockerfileImage:
    """What a Dockerfile puts in its image that matters to Python."""

    base: str
    # pip install's arguments: the packages, and the constraint file it names.
    packages: tuple[str, ...]
    constraint: str | None
    # (source in the build context, destination in the image)
    copies: tuple[tuple[str, str], ...]
    pythonpath: tuple[str, ...]
    entrypoint: tuple[str, ...]

    @classmethod
    def read(cls, dockerfile: Path) -> DockerfileImage:
        lines = [
            line
            for line in dockerfile.read_text().splitlines()
            if not line.lstrip().startswith("#")
        ]
        instructions = [
            line.strip().partition(" ")
            for line in re.sub(r"\\\n\s*", " ", "\n".join(lines)).splitlines()
            if line.strip()
        ]
        base, constraint = "", None
        packages: list[str] = []
        copies: list[tuple[str, str]] = []
        pythonpath: list[str] = []
        entrypoint: list[str] = []
        for name, _, arguments in instructions:
            name = name.upper()
            if name == "FROM":
                base = arguments.split()[0]
            elif name == "RUN" and "pip install" in arguments:
                install = arguments.split("pip install", 1)[1].split("&&", 1)[0].split()
                for index, word in enumerate(install):
                    if word == "--constraint":
                        constraint = install[index + 1]
                    elif not word.startswith("-") and install[index - 1] != "--constraint":
                        packages.append(word)
            elif name == "COPY":
                source, destination = arguments.split()
                copies.append((source, destination))
            elif name == "ENV":
                found = re.search(r"PYTHONPATH=(\S+)", arguments)
                if found:
                    pythonpath = found.group(1).split(":")
            elif name == "ENTRYPOINT":
                entrypoint = json.loads(arguments)
        return cls(
            base=base,
            packages=tuple(packages),
            constraint=constraint,
            copies=tuple(copies),
            pythonpath=tuple(pythonpath),
            entrypoint=tuple(entrypoint),
        )


def environment_python(folder: Path, family: str) -> Path:
    return folder / family / "venv" / "bin" / "python"


def build(folder: Path, family: str, root: Path | None = None) -> Path:
    """The image's environment under ``folder/family``: returns its interpreter."""
    root = root or repo_root()
    image = DockerfileImage.read(root / "containers" / family / "Dockerfile")
    home = folder / family
    shutil.rmtree(home, ignore_errors=True)
    venv = home / "venv"
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, venv], check=True)
    python = environment_python(folder, family)
    # The constraint file the Dockerfile copies into the image and installs under.
    copied = {destination: source for source, destination in image.copies}
    constraint = copied.get(image.constraint or "")
    constrained = ["--constraint", str(root / constraint)] if constraint else []
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--offline",
            "-p",
            python,
            *constrained,
            *image.packages,
        ],
        check=True,
    )
    # The image's file system: what COPY puts there (the lock, copied to /tmp for the
    # install and removed after, is not part of it).
    image_root = home / "image"
    for source, destination in image.copies:
        if destination.startswith("/tmp/"):
            continue
        target = image_root / destination.lstrip("/")
        if (root / source).is_dir():
            shutil.copytree(
                root / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / source, target)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "fleetcast_image.pth").write_text(
        "".join(f"{image_root / entry.lstrip('/')}\n" for entry in image.pythonpath)
    )
    return python


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleetcast.image_environments", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("families", nargs="*", metavar="FAMILY", help=", ".join(FAMILIES))
    options = parser.parse_args(argv)
    unknown = set(options.families) - set(FAMILIES)
    if unknown:
        parser.error(f"no such image: {', '.join(sorted(unknown))}")
    for family in options.families or FAMILIES:
        print(f"{family}: {build(options.folder, family)}")
    print(f"export {IMAGE_ENVIRONMENTS_ENV}={options.folder.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
