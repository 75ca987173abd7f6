"""``fleetcast upload`` puts files only where the pipeline processes them: a prefix outside
incoming/, or a key S3 would keep as odd characters rather than a path, is refused saying
why, and nothing is uploaded (no request is made: sockets are off in unit tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetcast.cli import NAME_VARIABLES, main


@pytest.fixture
def readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable in NAME_VARIABLES.values():
        monkeypatch.setenv(variable, "unused")
    path = tmp_path / "readings.csv"
    path.write_text("customer_id,timestamp,consumption\n1,2024-01-01,1\n")
    return path


@pytest.mark.parametrize(
    ("prefix", "said"),
    [
        ("../", "the key '../readings.csv' is not under incoming/"),
        ("manual/", "the key 'manual/readings.csv' is not under incoming/"),
        ("incoming", "the key 'incomingreadings.csv' is not under incoming/"),
        ("", "the key 'readings.csv' is not under incoming/"),
        ("incoming/../", "has a '..' path segment"),
        ("incoming//", "empty segment"),
        ("incoming/./", "'.' path segment"),
        ("incoming/" + "x" * 1020, "bytes; S3 keys hold at most 1024"),
    ],
)
def test_an_upload_the_pipeline_would_not_process_is_refused_saying_why(
    readings: Path, prefix: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # When a file is uploaded with that prefix
    code = main(["upload", str(readings), "--prefix", prefix])
    # Then it is a usage error that says what is wrong and that nothing was uploaded
    assert code == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert said in printed
    assert "nothing was uploaded" in printed
    if "not under" in said:
        assert "never processed" in printed
