"""Every relative link of the README and docs/ names a file of the repository.

make accuracy and make bench rewrite parts of the README, with links to what they wrote;
a run told to write elsewhere (a scratch folder) once left links to files that are not in
the repository, which nothing caught.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# [text](target) and ![alt](target), the target up to a space, a title or the bracket.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def relative_targets(document: Path) -> list[str]:
    targets = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same document
        targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_relative_links_name_files_of_the_repository(document):
    missing = [
        target
        for target in relative_targets(document)
        if not (document.parent / target).resolve().is_relative_to(ROOT)
        or not (document.parent / target).exists()
    ]
    assert missing == [], f"{document.relative_to(ROOT)} links to what is not there: {missing}"


def test_a_scratch_path_is_caught(tmp_path):
    document = tmp_path / "README.md"
    document.write_text(
        "See [the results](../../tmp/x/accuracy-results.json) and [AWS](https://aws.amazon.com)."
    )
    assert relative_targets(document) == ["../../tmp/x/accuracy-results.json"]
