"""Reading a model artifact from the folder SageMaker downloaded it into.

The load request's ``url`` is a folder holding either the ``{customer_id}.tar.gz``
archive itself or its two members already unpacked; a url naming the archive file
directly is accepted too.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from fleetcast_contracts.layout import MODEL_ARCHIVE_SUFFIX
from fleetcast_contracts.model_archive import (
    METADATA_MEMBER,
    MODEL_MEMBER,
    ModelMetadata,
    read_archive,
)
from fleetcast_inference.errors import ArtifactNotFoundError, InvalidArtifactError


def read_model_artifact(path: Path) -> tuple[str, ModelMetadata]:
    """Return ``(model_json, metadata)`` of the model at ``path``."""
    if not path.exists():
        raise ArtifactNotFoundError(f"nothing at {path}: the model was not downloaded there")
    try:
        if path.is_file():
            return _read_archive(path)
        unpacked = path / MODEL_MEMBER, path / METADATA_MEMBER
        if all(member.is_file() for member in unpacked):
            model_json, metadata_json = (member.read_text() for member in unpacked)
            return model_json, ModelMetadata.model_validate_json(metadata_json)
        archives = sorted(p for p in path.rglob(f"*{MODEL_ARCHIVE_SUFFIX}") if p.is_file())
    except ValidationError as error:
        raise InvalidArtifactError(_invalid_metadata(error)) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArtifactError(f"cannot read the model at {path}: {error}") from None
    if len(archives) == 1:
        return _read_archive(archives[0])
    if not archives:
        raise InvalidArtifactError(
            f"{path} holds neither {MODEL_MEMBER} with {METADATA_MEMBER} nor a "
            f"{MODEL_ARCHIVE_SUFFIX} archive"
        )
    shown = ", ".join(str(p.relative_to(path)) for p in archives[:5])
    raise InvalidArtifactError(f"{path} holds {len(archives)} archives ({shown}); expected one")


def _read_archive(archive: Path) -> tuple[str, ModelMetadata]:
    try:
        return read_archive(archive)
    except ValidationError as error:
        raise InvalidArtifactError(_invalid_metadata(error)) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidArtifactError(f"{archive.name}: {error}") from None


def _invalid_metadata(error: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(map(str, problem['loc'])) or 'document'}: {problem['msg']}"
        for problem in error.errors()[:5]
    )
    return f"{METADATA_MEMBER} is not valid model metadata: {problems}"
