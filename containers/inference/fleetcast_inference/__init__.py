"""fleetcast's multi-model endpoint container: serves any customer's Prophet forecast."""
