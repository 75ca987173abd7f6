"""``python -m fleetcast.openapi``: write the forecast API's OpenAPI document, generated
from the handler's routes (Powertools), to docs/openapi.json; ``--check`` only compares.

``make openapi`` runs it; a unit test fails when the committed document is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fleetcast.embedded.lambdas import load_handler
from fleetcast.embedded.stack import repo_root

DOCUMENT = Path("docs") / "openapi.json"
HANDLER_DIR = Path("functions") / "forecast_api"


def forecast_api_document(root: Path | None = None) -> str:
    """The OpenAPI document of functions/forecast_api/app.py, as JSON text."""
    base = root or repo_root()
    load_handler(base / HANDLER_DIR, "app.lambda_handler", "fleetcast_forecast_api_openapi")
    module: Any = sys.modules["fleetcast_forecast_api_openapi"]
    document: str = module.openapi_document()
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcast.openapi", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the document is stale")
    args = parser.parse_args(argv)
    target = repo_root() / DOCUMENT
    document = forecast_api_document()
    if args.check:
        current = target.read_text() if target.is_file() else ""
        if current != document:
            print(f"{DOCUMENT} is stale: run `make openapi`", file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(document)
    print(f"wrote {DOCUMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
