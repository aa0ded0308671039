"""`python -m goodput_operator.probe`: run the SDC probe on this node's accelerators.

Prints the verdict (JSON with --json); with --report, sends it to the operator over the
report channel (the probe pod's goodput.dev/report token); exits 0 when every device is
good, 1 when a device is bad, 2 when the probe could not run, 3 when it could not exercise
the accelerators --expect names and ran on the CPU instead (inconclusive: the operator
does not count such a run as clean).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from goodput_operator import names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m goodput_operator.probe",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["auto", "numpy", "torch", "neuron"],
                        default="auto",
                        help="auto: the one --expect needs (torch for cuda, neuron: "
                             "torch-neuronx); without --expect, torch when a CUDA device is "
                             "visible, else numpy")
    parser.add_argument("--expect", choices=["cuda", "neuron", "cpu"],
                        help="the node's accelerators: a run that cannot exercise them falls "
                             "back to the CPU and says so (exit 3)")
    parser.add_argument("--devices", type=int, default=0,
                        help="devices to probe (0: every visible one; numpy: 2 runs)")
    parser.add_argument("--size", type=int, default=1024, help="matrix size")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2,
                        help="run the work this often per device; repeats must be identical")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--inject-bitflip", type=int, metavar="DEVICE",
                        help="fault injection for tests: flip a bit in DEVICE's result")
    parser.add_argument("--node", default=os.environ.get(names.ENV_PROBE_NODE, ""),
                        help="the node probed (reported with the result)")
    parser.add_argument("--report", action="store_true",
                        help="send the result to the operator (GOODPUT_REPORT_URL)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from goodput_operator.probe.workload import run

    backend = args.backend
    if backend == "auto":
        backend = ({"cuda": "torch", "neuron": "neuron", "cpu": "numpy"}[args.expect]
                   if args.expect else "torch" if _cuda_visible() else "numpy")
    fallback = ""
    try:
        result = run(backend, args.devices or (2 if backend == "numpy" else 0), args.size,
                     args.iterations, args.seed, args.inject_bitflip, args.repeats)
    except (RuntimeError, ImportError) as err:
        if not args.expect or backend == "numpy":
            print(f"probe: cannot run: {err}", file=sys.stderr)
            return 2
        # the node's accelerators are out of reach (no torch, no device): the CPU run still
        # tells the operator what this image can do, and it will not count it as clean
        fallback = f"could not exercise {args.expect} devices with {backend} ({err}); "
        result = run("numpy", args.devices or 2, args.size, args.iterations, args.seed,
                     args.inject_bitflip, args.repeats)
        result.message = fallback + "ran on the CPU instead: " + result.message
    body = {"node": args.node, **result.as_dict()}
    print(json.dumps(body, indent=1) if args.json else
          f"probe {'FAILED' if not result.ok else 'INCONCLUSIVE' if fallback else 'OK'} "
          f"({result.backend}, {len(result.devices)} "
          f"device(s), {result.gflops} GFLOP/s each): {result.message}")
    if args.report:
        from goodput_operator.sdk import Reporter, ReportError

        try:
            Reporter().send("probe", body)
        except ReportError as err:
            print(f"probe: report refused: {err}", file=sys.stderr)
            return 2
    return 1 if not result.ok else 3 if fallback else 0


def _cuda_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


if __name__ == "__main__":
    sys.exit(main())
