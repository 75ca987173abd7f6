"""``python -m bench``: see :mod:`bench.suite`.

The import stays under the guard: measurements that need a fresh interpreter start one
with multiprocessing's spawn, which imports this module again, and it should cost nothing.
"""

import sys

if __name__ == "__main__":
    from bench.image_environment import as_the_training_image

    as_the_training_image()  # (before numpy loads: the suite imports it)
    from bench.suite import main

    sys.exit(main())
