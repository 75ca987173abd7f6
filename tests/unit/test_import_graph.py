"""No import cycles in fleetcast, its layer or its containers: not at module level, not
through an import inside a function, not through an import only the type checker reads. A
cycle held together by a late import works until someone moves that import. And the
layering: each package imports only the packages below it, so each image and each
function ships only what it uses."""

from __future__ import annotations

import ast
from pathlib import Path

from template_helpers import REPO_ROOT

PACKAGES = {
    "fleetcast": REPO_ROOT / "src" / "fleetcast",
    "fleetcast_common": REPO_ROOT / "layers" / "common" / "fleetcast_common",
    "fleetcast_contracts": REPO_ROOT / "layers" / "common" / "fleetcast_contracts",
    "fleetcast_forecasters": REPO_ROOT / "containers" / "forecasters" / "fleetcast_forecasters",
    "fleetcast_cost": REPO_ROOT / "functions" / "cost_report" / "fleetcast_cost",
    **{
        f"fleetcast_{family}": REPO_ROOT / "containers" / family / f"fleetcast_{family}"
        for family in ("processing", "training", "inference")
    },
}
# What each package may import of ours besides itself. The contracts are the bottom: every
# process reads them. The images (processing, training, inference, and the model families
# the training job and the endpoint share) never import the Lambda functions' code; the
# Lambda domain never imports an image's; the cost watch is a function of its own; only
# the CLI and the local stack (fleetcast) see everything.
MAY_IMPORT = {
    "fleetcast_contracts": set(),
    "fleetcast_forecasters": {"fleetcast_contracts"},
    "fleetcast_processing": {"fleetcast_contracts"},
    "fleetcast_training": {"fleetcast_contracts", "fleetcast_forecasters"},
    "fleetcast_inference": {"fleetcast_contracts", "fleetcast_forecasters"},
    "fleetcast_common": {"fleetcast_contracts"},
    "fleetcast_cost": {"fleetcast_contracts", "fleetcast_common"},
    "fleetcast": set(PACKAGES) - {"fleetcast"},
}


def modules(packages: dict[str, Path] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package, directory in packages.items():
        for path in directory.rglob("*.py"):
            parts = [package, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _ours(name: str, known: dict[str, Path]) -> str | None:
    """The module of ours that importing ``name`` runs, if any."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours ``module`` imports anywhere in its body, except its own
    parent packages (which Python has imported before the module anyway)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import submodule` imports the submodule.
            names |= {
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            }
    resolved = {_ours(name, known) for name in names}
    return {
        target
        for target in resolved
        if target and target != module and not module.startswith(target + ".")
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the modules along it), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph[node]):
            cycle = visit(target, [*path, node])
            if cycle:
                return cycle
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start, [])
        if cycle:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_through_any_import() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_late_and_type_only_imports() -> None:
    known = modules()
    # An import inside a function (the cost CLI loads the local stack only to run one)
    # and one under TYPE_CHECKING (costs.py types its context) are edges too.
    assert "fleetcast.embedded.stack" in imports(
        "fleetcast.cost_cli", known["fleetcast.cost_cli"], known
    )
    assert "fleetcast.embedded.context" in imports(
        "fleetcast.embedded.costs", known["fleetcast.embedded.costs"], known
    )


def test_no_module_of_fleetcast_or_its_layer_imports_itself_in_a_cycle() -> None:
    known = modules()
    graph = {module: imports(module, path, known) for module, path in known.items()}
    assert find_cycle(graph) is None


def init_cycles(known: dict[str, Path]) -> list[str]:
    """Package inits that import a module of their package which imports the package back
    (``from package import ...``): the graph above leaves parent packages out, since Python
    imports them first, so it cannot see these."""
    found = []
    for package, path in known.items():
        if path.name != "__init__.py":
            continue
        for module in sorted(imports(package, path, known)):
            if not module.startswith(package + "."):
                continue
            tree = ast.parse(known[module].read_text())
            if any(
                isinstance(node, ast.ImportFrom) and node.module == package
                for node in ast.walk(tree)
            ):
                found.append(f"{package} <-> {module}")
    return found


def test_no_package_init_imports_a_module_that_imports_the_package() -> None:
    assert init_cycles(modules()) == []


def test_the_init_check_sees_a_package_that_reexports_its_importer(tmp_path: Path) -> None:
    # Given a package whose init re-exports a module that imports the package
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.main import Main\n")
    (tmp_path / "pkg" / "main.py").write_text("from pkg import helpers\nclass Main: ...\n")
    (tmp_path / "pkg" / "helpers.py").write_text("")
    known = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        "pkg.main": tmp_path / "pkg" / "main.py",
        "pkg.helpers": tmp_path / "pkg" / "helpers.py",
    }
    # Then the check names the pair
    assert init_cycles(known) == ["pkg <-> pkg.main"]


def test_each_package_imports_only_the_packages_below_it() -> None:
    known = modules()
    crossing = sorted(
        f"{module} imports {target}"
        for module, path in known.items()
        for target in imports(module, path, known)
        if (theirs := target.split(".")[0]) != (ours := module.split(".")[0])
        and theirs not in MAY_IMPORT[ours]
    )
    assert crossing == []


def test_the_layering_check_sees_a_container_importing_lambda_code(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from fleetcast_common.registry import Registry\n")
    imported = imports("fleetcast_training.probe", probe, modules())
    assert imported == {"fleetcast_common.registry"}
    assert "fleetcast_common" not in MAY_IMPORT["fleetcast_training"]


# The peers' scripts run in virtual environments of their own (statsforecast's,
# AutoGluon's), without fleetcast: what they import of the bench, and the packages above
# them, must not import ours.
PEER_SCRIPTS = ("statsforecast_peers", "mlforecast_peers", "autogluon_peers")


def test_the_peers_scripts_import_nothing_of_fleetcast() -> None:
    known = modules({**PACKAGES, "bench": REPO_ROOT / "bench"})
    # (``python -m bench.accuracy.x`` imports its parent packages first)
    pending = ["bench", "bench.accuracy", *(f"bench.accuracy.{script}" for script in PEER_SCRIPTS)]
    reached: set[str] = set()
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        reached.add(module)
        for target in imports(module, known[module], known):
            assert target.startswith("bench"), f"{module} imports {target}"
            pending.append(target)
    assert "bench.accuracy.peer_rows" in reached
