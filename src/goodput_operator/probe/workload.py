"""The probe's workload and its verdict. numpy on the CPU; torch on each CUDA device;
torch-neuronx (torch_xla) on a Neuron device.

Every device multiplies the same seeded matrices ITERATIONS times (each product feeds the
next, normalised, so an early error propagates). Identical devices running the same
kernels give bit-identical results, so the devices vote on a digest of their result
(health.sdc.vote): a device outside the majority is bad, however small its error. Each
result is also compared element by element with a float64 reference computed on the CPU,
so a node with a single device, or a majority gone bad the same way, is still caught when
an error exceeds float32 rounding.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from goodput_operator.health.sdc import vote

REFERENCE_TOLERANCE = 1e-3  # largest element error allowed against float64 (results are
# normalised to a largest element of 1; float32 rounding stays near 1e-5)


@dataclass
class DeviceResult:
    index: int
    name: str
    digest: str
    relative_error: float
    ok: bool = True
    detail: str = ""


@dataclass
class ProbeResult:
    backend: str
    size: int
    iterations: int
    devices: list[DeviceResult] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)
    seconds: float = 0.0
    gflops: float = 0.0  # per device, sustained over the run
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.bad

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def inputs(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((size, size), dtype=np.float32),
            rng.standard_normal((size, size), dtype=np.float32))


def reference(a: np.ndarray, b: np.ndarray, iterations: int) -> np.ndarray:
    x = a.astype(np.float64)
    for _ in range(iterations):
        x = _step(x, b.astype(np.float64))
    return x


def _step(x: Any, b: Any) -> Any:
    y = x @ b
    return y / abs(y).max()


def flip_bit(result: np.ndarray, bit: int = 22) -> np.ndarray:
    """The injected fault: one bit of the largest element (so a single device's error is
    visible against the reference too), as a flaky multiplier would."""
    flipped = np.ascontiguousarray(result, dtype=np.float32).copy()
    words = flipped.reshape(-1).view(np.uint32)
    words[int(np.abs(flipped).argmax())] ^= np.uint32(1 << bit)
    return flipped


def run(backend: str = "numpy", devices: int = 1, size: int = 256, iterations: int = 4,
        seed: int = 1234, inject: int | None = None, repeats: int = 1) -> ProbeResult:
    """Run the workload REPEATS times on DEVICES accelerators (numpy: DEVICES independent
    runs on the CPU) and judge them: each device must repeat itself bit for bit, agree with
    the others and with the float64 reference. INJECT: flip a bit in that device's result."""
    a, b = inputs(size, seed)
    expected = reference(a, b, iterations)
    runner = {"torch": _torch_devices, "neuron": _neuron_devices}.get(backend, _numpy_devices)
    started = time.perf_counter()
    outputs = runner(a, b, iterations, devices, repeats)
    seconds = time.perf_counter() - started
    result = ProbeResult(backend, size, iterations, seconds=round(seconds, 4))
    flops = 2.0 * size ** 3 * iterations * repeats * len(outputs)
    result.gflops = round(flops / seconds / 1e9 / max(len(outputs), 1), 2) if seconds else 0.0
    digests: dict[int, str] = {}
    for index, (name, output, steady) in enumerate(outputs):
        if inject == index:
            output = flip_bit(output)
        digest = hashlib.sha256(np.ascontiguousarray(output).tobytes()).hexdigest()[:32]
        error = float(np.abs(output.astype(np.float64) - expected).max())
        device = DeviceResult(index, name, digest, error)
        if not steady:
            device.ok = False
            device.detail = f"its {repeats} repeats of the same work differ"
        elif not error <= REFERENCE_TOLERANCE:
            device.ok = False
            device.detail = (f"an element is off by {error:.3g} from the float64 reference "
                             f"(allowed {REFERENCE_TOLERANCE})")
        result.devices.append(device)
        digests[index] = digest
    if len(outputs) > 1:
        verdict = vote(0, "probe", digests, len(outputs))
        for index in verdict.suspects:
            result.devices[index].ok = False
            result.devices[index].detail = (result.devices[index].detail + "; " if
                                            result.devices[index].detail else "") + \
                f"result {digests[index][:16]} differs from {verdict.majority or ''}"[:200]
        if verdict.outcome == "unverifiable":
            result.message = verdict.message
    result.bad = [d.index for d in result.devices if not d.ok]
    names = ", ".join(f"{d.index} ({d.name}): {d.detail}" for d in result.devices if not d.ok)
    result.message = (f"bad device(s): {names}" if result.bad else
                      f"{len(outputs)} device(s) agree with each other and the reference") + \
        (f"; {result.message}" if result.message else "")
    return result


Output = tuple[str, np.ndarray, bool]  # device name, result, every repeat identical


def _repeat(first: Any, b: Any, iterations: int, repeats: int,
            done: Callable[[Any], Any]) -> list[Any]:
    """The chain from FIRST, REPEATS times over: each repeat's result as DONE takes it (a
    copy to float32, the tensor itself, a device's graph run and copy)."""
    results = []
    for _ in range(repeats):
        x = first
        for _ in range(iterations):
            x = _step(x, b)
        results.append(done(x))
    return results


def _numpy_devices(a: np.ndarray, b: np.ndarray, iterations: int, devices: int,
                   repeats: int) -> list[Output]:
    outputs = []
    for index in range(devices):
        results = _repeat(a, b, iterations, repeats, lambda x: np.asarray(x, dtype=np.float32))
        steady = all(np.array_equal(r, results[0]) for r in results[1:])
        outputs.append((f"cpu:{index}", results[-1], steady))
    return outputs


def _torch_devices(a: np.ndarray, b: np.ndarray, iterations: int, devices: int,
                   repeats: int) -> list[Output]:
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise RuntimeError("backend torch needs a CUDA device; none is visible")
    # no TF32: the devices must compute the same float32 products the reference checks
    torch.backends.cuda.matmul.allow_tf32 = False
    outputs = []
    for index in range(min(devices, count) if devices else count):
        device = torch.device("cuda", index)
        first, y = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
        results = _repeat(first, y, iterations, repeats, lambda x: x)
        torch.cuda.synchronize(device)
        steady = all(bool(torch.equal(r, results[0])) for r in results[1:])
        outputs.append((f"cuda:{index} {torch.cuda.get_device_name(index)}",
                        results[-1].cpu().numpy(), steady))
    return outputs


def _neuron_devices(a: np.ndarray, b: np.ndarray, iterations: int, devices: int,
                    repeats: int) -> list[Output]:
    """The chain on the NeuronCore this process is given (torch-neuronx runs one XLA
    device per process; NEURON_RT_VISIBLE_CORES chooses it). Never run in this project's
    CI, which has no Neuron device: it is written against torch_xla's public API."""
    import torch
    import torch_xla.core.xla_model as xm  # torch-neuronx's device layer

    device = xm.xla_device()
    first, y = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
    def run_now(x: Any) -> Any:
        xm.mark_step()  # run the traced graph on the device now
        return x.cpu().numpy()

    results = _repeat(first, y, iterations, repeats, run_now)
    steady = all(np.array_equal(r, results[0]) for r in results[1:])
    return [(f"neuron:0 {device}", results[-1], steady)]
