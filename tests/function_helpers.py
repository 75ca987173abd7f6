"""How tests import a Lambda function's handler module: ``functions/<directory>/app.py``,
under a module name of its own, as the local stack does (``load_handler``).

Handlers read their settings when first invoked (a cached ``settings()``), not at import,
so importing needs no environment; a fresh module reads the environment of the test that
first invokes it.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from types import ModuleType

from fleetcast.embedded.lambdas import load_handler

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_function(directory: str, module_name: str | None = None) -> ModuleType:
    """Import ``functions/<directory>/app.py`` afresh (under a new name unless
    ``module_name`` is given) and return the module."""
    name = module_name or f"fleetcast_test_{directory}_{uuid.uuid4().hex[:8]}"
    load_handler(REPO_ROOT / "functions" / directory, "app.lambda_handler", name)
    return sys.modules[name]
