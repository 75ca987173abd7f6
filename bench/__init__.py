"""fleetcast's benchmark suite: each row is fleetcast against the public AWS sample's way.

``python -m bench`` runs every row and writes ``bench/results.json`` and the chart;
``python -m bench --smoke`` runs the same code at tiny sizes and checks the answers.
See ``bench/__main__.py`` for the rows and ``README.md`` (Measured) for the latest table.
"""

import logging

# Prophet logs an error on import when plotly is missing; the suite draws no plots.
logging.getLogger("prophet.plot").disabled = True

# The jobs measured here run in this process as their image runs them: with the training
# image's ENV (one BLAS and OpenMP thread per process), set before numpy loads OpenBLAS.
# Without it, every worker process the job forks starts BLAS threads that spin for a
# tenth of a second before they sleep: CPU a deployed job does not spend.
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from fleetcast.embedded.sagemaker_jobs.containers import image_environment  # noqa: E402

for _key, _value in image_environment(
    "fleetcast-training", Path(__file__).resolve().parent.parent / "containers"
).items():
    os.environ.setdefault(_key, _value)
