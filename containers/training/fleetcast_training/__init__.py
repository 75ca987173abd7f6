"""fleetcast's SageMaker Training container: one Prophet model per customer, fitted in parallel."""
