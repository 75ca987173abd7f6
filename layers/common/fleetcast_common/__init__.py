"""The pipeline's Lambda functions' domain code and their adapters (the only modules of
those functions that call boto3), shared by the functions and the local stack. The cost
report is a product of its own: its domain code and its clients are in
``functions/cost_report/fleetcast_cost`` (``report.CostClients``, which ``fleetcast cost``
uses too).

Deployed as the ``FleetcastCommon`` Lambda layer, beside ``fleetcast_contracts``; no image
copies it (a container imports the contracts, never Lambda code: tests/unit/test_import_graph.py).
"""
