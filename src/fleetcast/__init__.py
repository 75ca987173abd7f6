"""fleetcast: per-customer forecasting on AWS SageMaker, and its embedded local stack."""
