"""fleetcast's SageMaker Processing container: validate, aggregate, split readings per customer."""
