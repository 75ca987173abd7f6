"""``python -m bench.accuracy``: see :mod:`bench.accuracy.suite`."""

import sys

if __name__ == "__main__":
    from bench.accuracy.suite import main

    sys.exit(main())
