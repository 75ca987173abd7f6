"""No function outside tests is longer than 80 lines, or it is named below with the reason it
reads best whole (issue 43): a long function usually does several jobs, each of which
reads better under a name of its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("src", "layers", "functions", "containers", "bench")
LONGEST = 80

# "path:function" -> why it stays longer than LONGEST lines.
ALLOWED: dict[str, str] = {}


def long_functions(root: Path = ROOT, trees: tuple[str, ...] = TREES) -> dict[str, int]:
    """``path:function`` -> its lines, for each function over :data:`LONGEST` lines."""
    found = {}
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "/tests/" in f"/{relative}":
                continue
            for node in ast.walk(ast.parse(path.read_text(), relative)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LONGEST:
                        found[f"{relative}:{node.name}"] = lines
    return found


def test_no_function_is_longer_than_80_lines_without_a_reason() -> None:
    # Given every function of the shipped trees
    # When those over the limit are listed
    found = long_functions()
    # Then each is on the allow-list, and the allow-list names only functions still long
    assert {name: lines for name, lines in found.items() if name not in ALLOWED} == {}
    assert sorted(set(ALLOWED) - set(found)) == []


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    # Given a module with one function of 81 lines and one of 80, and the same under tests/
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    source = f"def long():\n{body}\n    return 0\n\n\ndef short():\n{body}\n"
    (tmp_path / "src" / "tests").mkdir(parents=True)
    (tmp_path / "src" / "module.py").write_text(source)
    (tmp_path / "src" / "tests" / "test_module.py").write_text(source)
    # When the check reads the tree
    found = long_functions(tmp_path, ("src",))
    # Then only the first function outside tests is over the limit
    assert found == {"src/module.py:long": 81}
