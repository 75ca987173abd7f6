"""Really running the SageMaker jobs that moto only records, one module per part:
``runner`` (the moto hooks and both job kinds), ``training`` (a training instance's
contract), ``checkpoints``, ``transfer`` (S3 in and out) and ``containers`` (a job's
container as a local process)."""
