"""The ``fleetcast`` command's entry point (``python -m fleetcast`` too).

Kept free of imports: multiprocessing runs a program's main script again in every
process it starts with spawn or forkserver, and the local stack starts a dozen Lambda
workers that way. The console script imports this module, so they each pay nothing,
where importing :mod:`fleetcast.cli` costs a couple of seconds of CPU.
"""

from __future__ import annotations

import sys


def main() -> int:
    from fleetcast.cli import main as run  # here, not above: see the module docstring

    return run()


if __name__ == "__main__":
    sys.exit(main())
