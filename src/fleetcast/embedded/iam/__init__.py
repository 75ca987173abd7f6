"""IAM enforced on the local stack (see :mod:`.local_iam`)."""

from fleetcast.embedded.iam.local_iam import LocalIam

__all__ = ["LocalIam"]
