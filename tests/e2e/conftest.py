"""End-to-end tests run the embedded local stack: moto server, the functions in their own
worker processes, and the SageMaker jobs really executed."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetcast.embedded.stack import EmbeddedStack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    state_dir: Path = tmp_path_factory.mktemp("fleetcast-state")
    local = EmbeddedStack(state_dir=state_dir, port=0, parameters={"TrainingInstanceCount": "2"})
    local.start()
    yield local
    local.stop()
