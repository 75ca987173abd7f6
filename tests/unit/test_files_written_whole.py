"""Every file one process writes and another reads is written whole or not at all, by one
function (fleetcast_contracts.files): the old file, the new one or none, never half."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fleetcast_contracts.files import is_partial, write_whole, written_whole


def test_a_file_appears_only_once_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "summary.json"
    with written_whole(path) as partial:
        partial.write_text("half")
        assert not path.exists()
        assert is_partial(partial.name)
    assert path.read_text() == "half"
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_whole(path, b"old")
    with pytest.raises(RuntimeError), written_whole(path) as partial:
        partial.write_text("new, half")
        raise RuntimeError("the writer died")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_shared_writers_each_write_their_own_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "template.json"
    names: list[str] = []
    all_writing = threading.Barrier(4)

    def write() -> None:
        with written_whole(path, shared=True) as partial:
            names.append(partial.name)
            partial.write_text(partial.name)
            all_writing.wait(timeout=10)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(names)) == 4
    assert all(is_partial(name) for name in names)
    assert path.read_text() in names
    assert [p.name for p in tmp_path.iterdir()] == ["template.json"]
