"""``make email-preview``: the latest cost-report e-mail, rendered by headless Chromium
to a PNG, so a person can look at what the recipients get.

The outbox's ``.html`` is the e-mail's HTML part with the chart embedded as a data URI
(``fleetcast_cost.delivery.write_outbox``); Chromium renders it as a browser-based
mail client would. The PNG is written beside it unless ``--png`` says otherwise.

    python -m fleetcast.email_preview [--html FILE] [--png FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fleetcast.embedded.costs import outbox_dir
from fleetcast.embedded.stack import default_state_dir

CHROMIUM = "/usr/bin/chromium"
LATEST = "latest.html"
# Wide enough for the 900-pixel chart and the table beside it; tall enough for a report
# with a handful of anomalies and recommendations.
WINDOW = (1000, 1600)
TIMEOUT_SECONDS = 120


class PreviewFailed(Exception):
    """Nothing to render, or Chromium could not: the text says what to do."""


def latest_html() -> Path:
    """``latest.html`` in the outbox: ``FLEETCAST_OUTBOX`` (``fleetcast env`` sets it),
    else the default local stack's."""
    outbox = Path(os.environ.get("FLEETCAST_OUTBOX") or outbox_dir(default_state_dir()))
    path = outbox / LATEST
    if not path.is_file():
        raise PreviewFailed(
            f"no e-mail in {outbox} yet: run `fleetcast cost-report --send` against a local "
            "stack (or `make demo`), or give --html FILE"
        )
    return path


def chromium_command(
    html: Path, png: Path, profile: Path, window: tuple[int, int] = WINDOW
) -> list[str]:
    """Headless, without the sandbox (it needs user namespaces; root in a container has
    none) and without any of Chromium's own network traffic."""
    return [
        os.environ.get("CHROMIUM", CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        f"--window-size={window[0]},{window[1]}",
        html.resolve().as_uri(),
    ]


def render(html: Path, png: Path, window: tuple[int, int] = WINDOW) -> Path:
    """Render ``html`` to ``png`` with headless Chromium; the PNG's path."""
    chromium = os.environ.get("CHROMIUM", CHROMIUM)
    if shutil.which(chromium) is None:
        raise PreviewFailed(
            f"{chromium} is not installed: `make email-preview` installs it "
            "(apt-get install chromium), or set CHROMIUM to another Chromium or Chrome"
        )
    if not html.is_file():
        raise PreviewFailed(f"{html}: no such file")
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleetcast-chromium-") as profile:
        try:
            result = subprocess.run(
                chromium_command(html, png, Path(profile), window),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise PreviewFailed(f"Chromium did not finish within {TIMEOUT_SECONDS} s") from error
    if result.returncode != 0 or not png.is_file():
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise PreviewFailed(f"Chromium failed (exit {result.returncode}):\n{tail}")
    return png


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleetcast.email_preview", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--html", type=Path, help="the e-mail's HTML (default: the outbox's latest)"
    )
    parser.add_argument(
        "--png", type=Path, help="where to write the PNG (default: beside the HTML)"
    )
    parser.add_argument("--width", type=int, default=WINDOW[0])
    parser.add_argument("--height", type=int, default=WINDOW[1])
    args = parser.parse_args(argv)
    try:
        html = args.html or latest_html()
        png = args.png or html.with_suffix(".png")
        render(html, png, (args.width, args.height))
    except PreviewFailed as error:
        print(f"email-preview: {error}", file=sys.stderr)
        return 2
    print(f"rendered {html}\n      -> {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
