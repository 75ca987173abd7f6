"""What `make demo` installs before its first result (issue 40: six virtual environments,
about 1.8 GB of SAM CLI, checkov, the SageMaker SDK and the accuracy peers): the main
environment, and SAM's translator alone beside it (the local stack's IAM translates
template.yaml with it; its pydantic pin is not the main environment's)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from template_helpers import REPO_ROOT


def _dry_run(target: str) -> list[str]:
    """The commands `make TARGET` runs on a fresh clone (every prerequisite remade)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "--dry-run", "--always-make", "--no-print-directory", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize("target", ["demo", "up"])
def test_make_demo_installs_the_main_environment_and_sams_translator_alone(target: str) -> None:
    # When `make demo` (or `make up`) runs on a fresh clone
    commands = _dry_run(target)
    # Then it creates two environments: the main one and SAM's translator's
    created = set(
        re.findall(r"(?:-m venv|uv venv)\b.*?\s(\.venv[\w-]*)\s*$", "\n".join(commands), re.M)
    )
    assert created == {".venv", ".venv-sam"}, commands
    # And into SAM's it installs the translator alone, not the SAM CLI's lock
    into_sam = [c for c in commands if "pip install" in c and ".venv-sam/" in c]
    assert len(into_sam) == 1 and into_sam[0].endswith(" aws-sam-translator"), into_sam
    # And no other tool's lock file is read (checkov, the SDK, the AWS CLI, the peers)
    locks = set(re.findall(r"requirements/([\w.]+\.txt)", "\n".join(commands)))
    assert locks == {"lock.txt", "sam.lock.txt"}, locks
