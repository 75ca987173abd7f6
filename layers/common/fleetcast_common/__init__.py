"""Domain code shared by fleetcast's Lambda functions, containers and local stack.

Deployed as the ``FleetcastCommon`` Lambda layer and copied into each container image.
"""
