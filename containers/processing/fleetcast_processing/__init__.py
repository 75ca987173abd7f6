"""fleetcast's SageMaker Processing container: validate, aggregate and split readings per customer."""
