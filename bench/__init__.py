"""fleetcast's benchmark suite: each row is fleetcast against the public AWS sample's way.

``python -m bench`` runs every row and writes ``bench/results.json`` and the chart;
``python -m bench --smoke`` runs the same code at tiny sizes and checks the answers.
See ``bench/__main__.py`` for the rows and ``README.md`` (Measured) for the latest table.
"""

import logging

# Prophet logs an error on import when plotly is missing; the suite draws no plots.
logging.getLogger("prophet.plot").disabled = True
