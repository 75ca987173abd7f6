"""IAM enforced on the local stack (see :mod:`.local_iam`, whose ``LocalIam`` the stack
builds)."""
