"""``python -m bench.accuracy``: see :mod:`bench.accuracy.suite`."""

import sys

if __name__ == "__main__":
    from bench.image_environment import as_the_training_image

    as_the_training_image()  # (before numpy loads: the suite imports it)
    from bench.accuracy.suite import main

    sys.exit(main())
