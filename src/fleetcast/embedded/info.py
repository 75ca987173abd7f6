"""Where a running local stack is (``stack.json`` in its state folder), as clients read
it: light to import, so that commands that only need the stack's names (and every
``--help``) do not import the stack itself."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetcast.embedded.template import ACCOUNT_ID, REGION

DEFAULT_PORT = 4599
# The local forecast API's (fleetcast.embedded.api).
DEFAULT_API_PORT = 3000
STATE_FILE = "stack.json"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def repo_root() -> Path:
    """The checkout that holds template.yaml (the local stack runs from the source tree)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "template.yaml").is_file() and (parent / "functions").is_dir():
            return parent
    return Path.cwd()


def default_state_dir() -> Path:
    return Path(os.environ.get("FLEETCAST_HOME", repo_root() / ".fleetcast"))


@dataclass
class StackInfo:
    """Where a running local stack is, as clients need to know it."""

    endpoint_url: str
    stack_name: str
    raw_bucket: str
    artifacts_bucket: str
    registry_table: str
    job_name_prefix: str
    state_dir: str
    upload_queue_table: str = ""
    region: str = REGION
    account_id: str = ACCOUNT_ID
    pid: int = field(default_factory=os.getpid)
    extra: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """What a standard client (boto3, the AWS CLI) needs to talk to this stack."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            **CREDENTIALS,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "FLEETCAST_RAW_BUCKET": self.raw_bucket,
            "FLEETCAST_ARTIFACTS_BUCKET": self.artifacts_bucket,
            "FLEETCAST_REGISTRY_TABLE": self.registry_table,
            "FLEETCAST_JOB_NAME_PREFIX": self.job_name_prefix,
            "FLEETCAST_UPLOAD_QUEUE_TABLE": self.upload_queue_table,
            **self.extra,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, state_dir: Path | None = None) -> StackInfo:
        path = (state_dir or default_state_dir()) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"no local stack is running (no {path}); start one with `fleetcast up`"
            )
        info = cls(**json.loads(path.read_text()))
        if not _alive(info.pid):
            raise FileNotFoundError(
                f"the local stack recorded in {path} (pid {info.pid}) is not running; start one with `fleetcast up`"
            )
        return info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
