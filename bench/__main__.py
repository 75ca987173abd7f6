"""``python -m bench``: see :mod:`bench.suite`.

The import stays under the guard: measurements that need a fresh interpreter start one
with multiprocessing's spawn, which imports this module again, and it should cost nothing.
"""

import sys

if __name__ == "__main__":
    from bench.suite import main

    sys.exit(main())
