"""The contracts between fleetcast's processes, written once.

The functions, the three containers, the CLI, the local stack and the tests import these
modules instead of repeating them; every image copies ``layers/common/fleetcast_common``,
so a container ships the same module the Lambda functions do.

- :mod:`.opt_ml`: the ``/opt/ml`` root every SageMaker container reads, and how the local
  stack moves it;
- :mod:`.processing`, :mod:`.training`, :mod:`.inference`: each container family's paths,
  environment variable names, file names and file formats;
- :mod:`.errors`: the AWS error code of a botocore error.

The rest of the contract already lived once in the layer and stays where it is:
``fleetcast_common.layout`` (S3 keys), ``fleetcast_common.ids`` (customer, run and job
ids), ``fleetcast_common.model_archive`` (the per-customer archive) and
``fleetcast_common.training_manifest`` (what each training instance reports).
"""
