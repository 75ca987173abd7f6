"""The embedded local AWS: moto server plus a runner that really executes SageMaker jobs."""
