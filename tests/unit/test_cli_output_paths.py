"""A file a command writes goes into a folder that exists: a typo in the folder is an
error that says so, never a new tree of folders created wherever the path points (issue
40: `--plot /nonexistent/dir/x.png` created the folders at the file system's root and
exited 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetcast.cli import main


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["forecast", "meter-1", "--plot"], "--plot"),
        (["generate", "--customers", "1", "--days", "30", "-o"], "-o"),
        (["export", "-o"], "-o"),
        (["report", "-o"], "-o"),
    ],
)
def test_a_missing_output_folder_is_an_error_and_nothing_is_created(
    command: list[str],
    option: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a path whose folder does not exist (and an API and a stack that would fail
    # differently if they were reached: sockets are off)
    monkeypatch.setenv("FLEETCAST_API_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FLEETCAST_API_KEY", "some-key")
    monkeypatch.setenv("FLEETCAST_HOME", str(tmp_path / "no-stack"))
    monkeypatch.setenv("COLUMNS", "400")
    missing = tmp_path / "nonexistent" / "dir"
    target = missing / ("x.png" if option == "--plot" else "x.parquet")
    if command[0] == "generate":
        target = missing / "x.csv.gz"
    # When the command is asked to write there
    assert main([*command, str(target)]) == 2
    # Then it says the folder does not exist, and creates nothing
    complaint = " ".join(capsys.readouterr().err.split())
    assert f"the folder {missing} does not exist" in complaint, complaint
    assert not (tmp_path / "nonexistent").exists()


def test_a_file_in_place_of_the_folder_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    assert main(["generate", "-o", str(tmp_path / "a-file" / "x.csv")]) == 2
    assert "is not a folder" in capsys.readouterr().err
