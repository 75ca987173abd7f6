"""The bundled, dated on-demand price table for SageMaker training instances.

``prices.json`` beside this module says when and where its figures come from; every
saving the report quotes is computed from it, so a reader can redo the arithmetic.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

# Sizes in the order they grow; "next size down" is the largest smaller one in the table.
_SIZE_ORDER = (
    "medium",
    "large",
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "9xlarge",
    "12xlarge",
    "16xlarge",
    "18xlarge",
    "24xlarge",
    "48xlarge",
)


class InstancePrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_hour: float = Field(gt=0)
    vcpus: int = Field(gt=0)
    memory_gib: float = Field(gt=0)
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_gib: float = 0.0
    gpu_fp32_tflops: float = 0.0


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    as_of: str
    region: str
    currency: str
    usage: str
    source: str
    spot_discount_assumed: float = Field(gt=0, lt=1)
    spot_discount_note: str
    instances: dict[str, InstancePrice]

    def get(self, instance_type: str) -> InstancePrice | None:
        return self.instances.get(instance_type)

    def next_size_down(self, instance_type: str) -> str | None:
        """The largest smaller size of the same family with as many GPUs, if priced."""
        current = self.get(instance_type)
        family, size = _split(instance_type)
        if current is None or size not in _SIZE_ORDER:
            return None
        smaller = [
            name
            for name, price in self.instances.items()
            if _split(name)[0] == family
            and _split(name)[1] in _SIZE_ORDER
            and _SIZE_ORDER.index(_split(name)[1]) < _SIZE_ORDER.index(size)
            and price.gpus == current.gpus
        ]
        return max(smaller, key=lambda name: _SIZE_ORDER.index(_split(name)[1]), default=None)

    def cheaper_gpu_instance(self, instance_type: str, memory_needed_gib: float) -> str | None:
        """The cheapest instance with as many GPUs, each at least as large and as fast
        (fp32), enough vCPUs and host memory, and a lower price; None when there is none."""
        current = self.get(instance_type)
        if current is None or current.gpus == 0:
            return None
        candidates = [
            (price.usd_per_hour, name)
            for name, price in self.instances.items()
            if price.gpus == current.gpus
            and price.gpu_memory_gib >= current.gpu_memory_gib
            and price.gpu_fp32_tflops >= current.gpu_fp32_tflops
            and price.vcpus >= current.vcpus
            and price.memory_gib >= memory_needed_gib
            and price.usd_per_hour < current.usd_per_hour
        ]
        return min(candidates)[1] if candidates else None

    def cheapest_cpu_instance(self, min_vcpus: int) -> str | None:
        candidates = [
            (price.usd_per_hour, name)
            for name, price in self.instances.items()
            if price.gpus == 0 and price.vcpus >= min_vcpus
        ]
        return min(candidates)[1] if candidates else None


def family(instance_type: str) -> str:
    """``"ml.p3.2xlarge"`` -> ``"p3"``."""
    return _split(instance_type)[0]


def _split(instance_type: str) -> tuple[str, str]:
    parts = instance_type.split(".")
    if len(parts) != 3:
        return ("", "")
    return parts[1], parts[2]


@functools.cache
def bundled_prices() -> PriceTable:
    text = resources.files("fleetcast_cost").joinpath("prices.json").read_text()
    return PriceTable.model_validate(json.loads(text))
