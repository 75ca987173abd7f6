"""The contracts between fleetcast's processes, written once.

The functions, the three containers, the CLI, the local stack and the tests import these
modules instead of repeating them; it is part of the ``FleetcastCommon`` Lambda layer and
every image copies it, so a container ships the same module the Lambda functions do. It
imports nothing else of fleetcast's.

- :mod:`.opt_ml`: the ``/opt/ml`` root every SageMaker container reads, and how the local
  stack moves it;
- :mod:`.processing`, :mod:`.training`, :mod:`.inference`: each container family's paths,
  environment variable names, file names and file formats;
- :mod:`.errors`: the AWS error code of a botocore error;
- :mod:`.layout`: the S3 keys of uploads, staged files, archives, manifests and summaries;
- :mod:`.object_keys`: where an S3 object may be written below a folder (or why it may
  not), and the safe names uploads are staged under;
- :mod:`.ids`: customer ids, run ids and the SageMaker job names made from them;
- :mod:`.model_archive`: the per-customer model archive and its metadata;
- :mod:`.training_manifest`: what each training instance reports of its customers;
- :mod:`.holiday_calendar`, :mod:`.quantiles`, :mod:`.quality_gate`: the holiday calendar,
  the quantiles served and the gate a model passes to go live, read by the training job,
  the endpoint and the functions alike;
- :mod:`.images`: the image URIs a stack accepts.
"""
