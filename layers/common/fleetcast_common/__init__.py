"""The Lambda functions' domain code and the only boto3 callers (adapters), shared by the
functions and the local stack.

Deployed as the ``FleetcastCommon`` Lambda layer, beside ``fleetcast_contracts``; no image
copies it (a container imports the contracts, never Lambda code: tests/unit/test_import_graph.py).
"""
