"""Imported first by the Lambda workers' forkserver (:func:`fleetcast.embedded.lambdas.
worker_context`), so that its children inherit what it sets.

The forkserver preloads the program's main module when it was run by name
(``python -m bench.scale``); multiprocessing then runs that module again in each worker as
``__mp_main__``, and runpy warns that the module is already imported. Its imports being
already done is the point, so the warning is left out.

The workers also keep to two malloc arenas, as the stack does (fleetcast.embedded.malloc).
"""

import warnings

from fleetcast.embedded.malloc import limit_arenas

limit_arenas()

warnings.filterwarnings(
    "ignore",
    message=r".* found in sys\.modules after import of package .*",
    category=RuntimeWarning,
    module="runpy",
)
