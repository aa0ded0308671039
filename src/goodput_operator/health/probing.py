"""What an SDC probe run proves about a node: only the accelerators it exercised.

Pure. A node suspected of corrupting GPU math is not cleared by matrix products on its CPU
(the default image has no torch, and numpy runs anywhere): a run whose backend did not
exercise the node's kind of accelerator, or did not reach every device the node has, is
*inconclusive*. It neither clears nor condemns; the node stays as it was, for a human or
a probe image that can test it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["cuda", "neuron", "cpu"]
KINDS: dict[str, Kind] = {"cuda": "cuda", "neuron": "neuron", "cpu": "cpu"}

EXERCISES: dict[str, Kind] = {"torch": "cuda", "neuron": "neuron", "numpy": "cpu"}
"""The probe's backends, and the kind of device each one's matrix products run on."""

WHAT_TO_INSTALL: dict[Kind, str] = {
    "cuda": "an image with torch built for CUDA (e.g. the PyTorch CUDA images) and this "
            "package",
    "neuron": "an image with torch-neuronx (the AWS Neuron deep learning containers) and "
              "this package",
    "cpu": "this package",
}


def accelerator_kind(resource: str) -> Kind:
    """The kind of device behind an extended resource: NVIDIA's (nvidia.com/gpu and MIG
    slices) are CUDA devices, AWS Neuron's (neuron, neuroncore, neurondevice) Neuron
    devices; anything else is probed on the CPU."""
    if resource.startswith("nvidia.com/"):
        return "cuda"
    if resource.startswith("aws.amazon.com/neuron"):
        return "neuron"
    return "cpu"


@dataclass(frozen=True)
class Inconclusive:
    """A probe run that proved nothing about the node's accelerators, and the image it ran:
    the same image is not run on the node again by itself."""

    image: str
    message: str


def inconclusive(expects: Kind, backend: str, devices: int, needed: int) -> str | None:
    """Why a run on BACKEND over DEVICES devices proves nothing about a node whose
    accelerators are EXPECTS, NEEDED of them (0: not counted), or None when it does."""
    ran = EXERCISES.get(backend)
    if ran != expects:
        return (f"the probe ran on {backend or 'an unknown backend'} ({ran or 'unknown'}), "
                f"not on the node's {expects} devices: run it with "
                f"{WHAT_TO_INSTALL[expects]} (UltraServerGroup spec.probes.image)")
    if needed and devices < needed:
        return f"the probe reached {devices} of the node's {needed} {expects} devices"
    return None
