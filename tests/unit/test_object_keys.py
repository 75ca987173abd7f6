"""No S3 key makes any code write outside its folder: every shape S3 allows is mapped to a
path below the folder, or refused with a reason naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetcast_contracts.object_keys import (
    UnsafeKeyError,
    local_path,
    local_paths,
    safe_file_name,
    staged_upload_name,
    upload_file_name,
)
from fleetcast_contracts.processing import (
    source_key_environment,
    source_key_from_environment,
)

BASE = "incoming/"
LONGEST = "incoming/" + "é" * 507 + ".c"  # 1024 bytes, S3's limit


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("incoming//probe.csv", "empty segment ('//') where its folder ends"),
        ("incoming/a//probe.csv", "empty path segment"),
        ("incoming/a/", "empty path segment"),
        ("incoming/../probe.csv", "'..' path segment"),
        ("incoming/u.csv_/../../../../tmp/pwned/evil.csv", "'..' path segment"),
        ("incoming/./probe.csv", "'.' path segment"),
        ("incoming/..", "'..' path segment"),
        ("incoming/", "names no file"),
        ("incoming/" + "x" * 256 + ".csv", "path segment of 260 bytes"),
        ("incoming/" + "é" * 128, "path segment of 256 bytes"),
        ("incoming/a\x00b.csv", "NUL or control character"),
        ("incoming/a\nb.csv", "NUL or control character"),
        ("incoming/a\x7fb.csv", "NUL or control character"),
        ("elsewhere/a.csv", "is not under 'incoming/'"),
    ],
)
def test_a_key_that_would_leave_or_break_its_folder_is_refused_naming_it(
    tmp_path: Path, key: str, problem: str
) -> None:
    with pytest.raises(UnsafeKeyError) as refused:
        local_path(tmp_path, key, BASE)
    message = str(refused.value)
    assert problem in message
    # It names the key as written (control characters escaped)
    assert message.startswith("S3 key " + repr(key)[:30])
    assert refused.value.key == key


@pytest.mark.parametrize(
    ("key", "relative"),
    [
        ("incoming/a.csv", "a.csv"),
        ("incoming/sub/dir/a.csv", "sub/dir/a.csv"),
        ("incoming/données été.csv", "données été.csv"),
        ("incoming/日本語/メーター.csv", "日本語/メーター.csv"),
        ("incoming/a+b%20c:d.csv", "a+b%20c:d.csv"),
        ("incoming/..a.csv", "..a.csv"),
        ("incoming/" + "é" * 127 + "x", "é" * 127 + "x"),  # 255 bytes: the most a name holds
    ],
)
def test_nul_free_unicode_and_plain_keys_land_at_their_path_below_the_folder(
    tmp_path: Path, key: str, relative: str
) -> None:
    path = local_path(tmp_path, key, BASE)
    assert path == tmp_path / relative
    assert path.resolve().is_relative_to(tmp_path.resolve())


def test_a_key_that_is_also_the_folder_of_another_is_refused_naming_both(tmp_path: Path) -> None:
    # Given incoming/pre and incoming/pre/inner.csv (both legal S3 keys)
    keys = ["incoming/pre", "incoming/pre/inner.csv", "incoming/prefix.csv"]
    # Then one cannot be a file and the other's folder: refused before anything is written
    with pytest.raises(UnsafeKeyError, match="is also the folder of S3 key") as refused:
        local_paths(tmp_path, keys, BASE)
    assert "'incoming/pre'" in str(refused.value)
    assert "'incoming/pre/inner.csv'" in str(refused.value)
    # And keys that only share a prefix of characters do not clash
    assert local_paths(tmp_path, keys[1:], BASE) == {
        "incoming/pre/inner.csv": tmp_path / "pre/inner.csv",
        "incoming/prefix.csv": tmp_path / "prefix.csv",
    }


def test_a_refusal_names_a_long_key_cut_to_fit_a_failure_reason(tmp_path: Path) -> None:
    with pytest.raises(UnsafeKeyError) as refused:
        local_path(tmp_path, "incoming/" + "x" * 1000 + "/../a.csv", BASE)
    assert len(str(refused.value)) < 400
    assert "(1018 bytes)" in str(refused.value)


@pytest.mark.parametrize(
    ("key", "staged"),
    [
        ("incoming/readings-2026-11-29.csv", "readings-2026-11-29.csv"),
        ("incoming/a.csv.gz", "a.csv.gz"),
        ("incoming/daily.csv", "daily.csv"),
        ("incoming/pre", "pre"),
        ("incoming/a+b.csv", "upload.csv"),
        ("incoming/100%.csv", "upload.csv"),
        ("incoming/my readings.csv.gz", "upload.csv.gz"),
        ("incoming/2023-08-08T14:03:40.532432.csv", "upload.csv"),
        ("incoming/données-été.csv", "upload.csv"),
        ("incoming/" + "x" * 891 + ".csv", "upload.csv"),
        (LONGEST, "upload.c"),
        ("incoming/read ings", "upload"),
        ("incoming//probe.csv", "probe.csv"),
        ("incoming/u.csv_/../../../../tmp/pwned/evil.csv", "evil.csv"),
        ("incoming/..", "upload"),
        ("incoming/a\x00b.csv", "upload.csv"),
        ("incoming/", "upload"),
    ],
)
def test_every_upload_is_staged_under_a_short_safe_file_name(key: str, staged: str) -> None:
    assert staged_upload_name(key) == staged
    # A name that is one plain path segment, so any folder holds it
    assert local_path(Path("/run"), "upload/" + staged, "upload/") == Path("/run") / staged
    assert staged.isascii() and len(staged) <= 100


def test_a_models_file_name_is_safe_whatever_its_target_model() -> None:
    assert safe_file_name("models/run/../..", "model") == "model"
    assert safe_file_name("models/run/", "model") == "model"
    assert safe_file_name("models/run/7.tar.gz", "model") == "7.tar.gz"


@pytest.mark.parametrize(
    "key",
    [
        "incoming/daily.csv",
        "incoming//probe.csv",
        "incoming/u.csv_/../../../../tmp/pwned/evil.csv",
        "incoming/a\x00b\nc%41.csv",
        "incoming/données été/日本語.csv",
        LONGEST,
    ],
)
def test_the_upload_key_travels_whole_through_the_jobs_environment(key: str) -> None:
    environment = source_key_environment(key)
    # SageMaker's limits on a processing job's environment: 256 characters a value, 100
    # values; and no NUL (no process environment can hold one)
    assert all(len(value) <= 256 and value.isascii() for value in environment.values())
    assert all("\x00" not in value for value in environment.values())
    assert len(environment) <= 20
    assert source_key_from_environment({"OTHER": "x", **environment}) == key
    assert source_key_from_environment({}) is None


def test_an_uploads_file_name_is_the_last_segment_of_its_key() -> None:
    assert upload_file_name("incoming/sub/daily.csv") == "daily.csv"
    assert upload_file_name("incoming//probe.csv") == "probe.csv"
    assert upload_file_name("incoming/a/") == "incoming/a/"
