#!/usr/bin/env python3
"""A small, real data-parallel PyTorch training job that runs under the Goodput Operator.

Copy it as the skeleton of your own trainer. It reads only what the operator gives every
worker: the rendezvous (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, as torchrun does), where to
resume (GOODPUT_RESUME_*), where to save (GOODPUT_CHECKPOINT_DIR) and the report channel
(GOODPUT_REPORT_URL with the pod's projected token). It:
- waits until rank 0's stable name resolves (pods start in any order),
- resumes from the checkpoint the operator chose, after verifying it against its digest,
- trains deterministically (seeded data per step and rank, one thread, gradients averaged
  as one flat all-reduce in a fixed order): a run interrupted and resumed ends with the same
  parameters as an uninterrupted one, bit for bit,
- reports its steps with a fingerprint of its parameters (the replicas vote on them: a
  replica that disagrees points at silent data corruption on its node): every step, or
  every k-th when the operator asks (a large gang), and always a checkpoint's step,
- saves a checkpoint every --checkpoint-every steps on rank 0, atomically, and commits it;
  and at once when the operator asks (sdk.save_requested: the job is being preempted),
- prints `FINAL step=N fingerprint=F reported=R` (R: the steps it reported) and exits 0,
- exits at once on SIGTERM, even while stuck in a collective (see exit_on_sigterm).

The backend is gloo on CPU; the same script runs with NCCL (or Neuron's XLA backend)
where those devices exist: pass --backend.

For the sandbox's demos and tests, --corrupt-at-step/--corrupt-node make the replica on
one node silently corrupt its parameters, as a bad accelerator would.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path


def exit_on_sigterm() -> None:
    """Exit at once on SIGTERM. The operator restarts a gang by deleting its pods, and the
    next attempt starts only once they are gone: a worker that ignores SIGTERM holds the
    restart for the pod's whole grace period (30 s by default). A Python handler would not
    do: it runs only between bytecodes, never while the main thread waits in a collective
    that a lost peer hangs; and as its container's PID 1 the process would ignore SIGTERM
    left at its default. So SIGTERM is blocked in every thread (torch's threads, started
    later, inherit the mask) and one thread waits for it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        os._exit(143)
    threading.Thread(target=wait, name="sigterm", daemon=True).start()


exit_on_sigterm()  # before torch starts its threads

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from goodput_operator.sdk import (  # noqa: E402
    ReportError,
    checkpoint,
    checkpoint_interval,
    fingerprint,
    flush_reports,
    report_step,
    reporting_every,
    save_requested,
)


class Reports:
    """This rank's step reports: the SDK sends every k-th step, as the operator asks
    (always a checkpoint's step, so that its vote verifies the checkpoint), each rank its
    phase of steps later, from a thread of its own (the step never waits for the operator);
    this says when k changes, and counts the steps that sent."""

    def __init__(self) -> None:
        self.every, self.sent = 1, 0

    def step(self, step: int, numbers: dict[str, float], parameters: str, scheduled: bool
             ) -> None:
        answer = report_step(step, numbers, fingerprint=parameters, checkpoint=scheduled)
        if not answer.get("skipped"):
            self.sent += 1
        if reporting_every() != self.every:
            self.every = reporting_every()
            log(f"step {step}: reporting every {self.every} steps, as the operator asks")

    def finish(self) -> None:
        """Send what the SDK still holds back (the last voted steps' reports) or queued."""
        try:
            if not flush_reports().get("skipped"):
                self.sent += 1
        except ReportError as err:
            log(f"last reports failed: {err}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=10,
                        help="steps between checkpoints; 0: as often as the operator advises "
                             "(sdk.checkpoint_interval(); every 10 steps until it does)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="pace each step to at least this long (a stand-in for real work)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--backend", default="gloo",
                        help="gloo (CPU) or nccl (one CUDA device per process: LOCAL_RANK)")
    parser.add_argument("--corrupt-at-step", type=int, default=None)
    parser.add_argument("--corrupt-node", default=None,
                        help="only the replica running on this node corrupts (NODE_NAME)")
    parser.add_argument("--sharded", action="store_true",
                        help="every rank saves its own part of each checkpoint "
                             "(checkpoint.save_sharded), as a sharded model would")
    parser.add_argument("--die-writing-at-step", type=int, default=None,
                        help="with --sharded, in the first attempt: rank 2 writes half its "
                             "part of this step's checkpoint and dies")
    parser.add_argument("--slow-rank", type=int, default=None,
                        help="this rank works --slow-seconds longer each step (a straggler)")
    parser.add_argument("--slow-seconds", type=float, default=0.5)
    parser.add_argument("--hang-at-step", type=int, default=None,
                        help="in the first attempt, rank 1 stops before this step's "
                             "collective and never returns (a stuck device): the others "
                             "wait in it, every process alive, no step reported")
    return parser.parse_args()


def log(message: str) -> None:
    rank = os.environ.get("RANK", "?")
    print(f"{time.strftime('%H:%M:%S')} rank {rank}: {message}", flush=True)


def wait_for_name(host: str, timeout: float = 120) -> None:
    """Rank 0's name resolves once its pod has an address (a headless Service that
    publishes not-ready addresses); the ranks start in any order, so wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def rendezvous(backend: str, master: str, port: str, rank: int, world: int) -> None:
    """Join the gang at rank 0's store. A failure's last line (what the incident quotes,
    160 characters) says where the name pointed before and after, and this pod's own
    address: enough to tell a stale or unreachable address from a store never opened."""
    resolved = addresses(master)
    try:
        dist.init_process_group(backend, init_method=f"tcp://{master}:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
    except Exception as err:
        raise RuntimeError(f"rendezvous at {master}:{port}: was {resolved}, now "
                           f"{addresses(master)}, me {addresses(socket.gethostname())}: "
                           f"{type(err).__name__}") from err


def addresses(host: str) -> list[str]:
    """What HOST resolves to now (for a failure's last words)."""
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except socket.gaierror as err:
        return [f"unresolved: {err}"]


def batch(seed: int, step: int, rank: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's data for STEP: a pure function of (seed, step, rank), so a resumed run
    sees exactly the batches an uninterrupted one would."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(32, hidden, generator=generator)
    y = x.sum(dim=1, keepdim=True).sin()
    return x, y


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Data parallelism in one collective: every rank's gradients, flattened in parameter
    order, summed and divided by the world size. (DistributedDataParallel does the same in
    buckets it lays out anew after its first step, which changes the order floating point
    sums are taken in after a resume: the result would differ in the last bits.)"""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def save(args: argparse.Namespace, step: int, rank: int, world: int, state: dict) -> None:
    """Rank 0's whole state, or with --sharded every rank's part (committed once all are
    down); --die-writing-at-step: rank 2 dies halfway through its part."""
    def write(folder: Path) -> None:
        if step == args.die_writing_at_step and rank == 2 and \
                os.environ.get("GOODPUT_RESTART", "0") == "0":
            (folder / f"rank-{rank}.pt").write_bytes(b"half a checkpoint")
            log(f"dying while writing my part of step {step} (--die-writing-at-step)")
            os._exit(1)
        torch.save(state, folder / (f"rank-{rank}.pt" if args.sharded else "state.pt"))

    try:
        if args.sharded:
            folder, digest = checkpoint.save_sharded(step, write, rank, world)
        else:
            folder, digest = checkpoint.save(step, write)
        if digest:
            log(f"checkpoint step {step} committed: {folder} {digest}")
    except ReportError as err:  # written, but the operator does not know of it
        log(f"checkpoint step {step} not committed: {err}")


_saved_for: list[object] = []  # the preemption asks already answered with a checkpoint


def save_now(step: int) -> bool:
    """Whether the operator asks for a checkpoint now (this job is being preempted), agreed
    by every rank: ranks see the ask steps apart (their reports are answered in the
    background, at their phases), and a sharded checkpoint needs the same step from each.
    Once per ask."""
    ask = save_requested()
    wanted = torch.tensor([1 if ask and ask not in _saved_for else 0])
    dist.all_reduce(wanted, op=dist.ReduceOp.MAX)
    if not int(wanted.item()):
        return False
    _saved_for.append(ask)
    log(f"saving step {step} now: asked by the operator ({ask})")
    return True


def advised(step: int, last_save: float) -> bool:
    """--checkpoint-every 0: whether a checkpoint is due at STEP by the operator's advice,
    agreed by every rank (the advice reaches ranks steps apart); every 10 steps until
    there is one. LAST_SAVE: when this rank last saved (time.monotonic())."""
    interval = checkpoint_interval()
    due = step % 10 == 0 if interval is None else time.monotonic() - last_save >= interval
    flag = torch.tensor([1 if due else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main() -> int:
    args = parse()
    torch.set_num_threads(1)  # deterministic reductions, and kind to a 2-core sandbox
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    master, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    node = os.environ.get("NODE_NAME", "")
    log(f"world {world}, master {master}:{port}, node {node or '?'}, attempt "
        f"{os.environ.get('GOODPUT_RESTART', '0')}")
    wait_for_name(master)
    hostfile = Path(os.environ.get("GOODPUT_HOSTFILE", "/nonexistent"))
    if hostfile.exists():  # the names an MPI launcher would reach
        hosts = [line.split()[0] for line in hostfile.read_text().splitlines() if line]
        for host in hosts:
            wait_for_name(host)
        log(f"hostfile: all {len(hosts)} names resolve")
    rendezvous(args.backend, master, port, rank, world)

    device = torch.device("cpu")
    if args.backend == "nccl":  # NCCL reduces CUDA tensors: one device per process
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.hidden), torch.nn.Tanh(),
                                torch.nn.Linear(args.hidden, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start, last_save = 0, time.monotonic()
    point = checkpoint.resume_point()
    if point is not None:
        folder = checkpoint.verified(point)
        part = folder / f"rank-{rank}.pt"  # a sharded checkpoint: this rank's own part
        state = torch.load(part if part.exists() else folder / "state.pt",
                           map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        log(f"resumed from step {start} ({point.path}, digest verified)")

    reports = Reports()
    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        x, y = (t.to(device) for t in batch(args.seed, step, rank, args.hidden))
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if step == args.hang_at_step and rank == 1 and \
                os.environ.get("GOODPUT_RESTART", "0") == "0":
            log(f"hanging before the collective of step {step} (--hang-at-step)")
            while True:
                time.sleep(3600)
        if rank == args.slow_rank:  # a throttled device: this rank's work takes longer
            time.sleep(args.slow_seconds)
        compute = time.monotonic() - began  # this rank's own work, before the collective
        average_gradients(model, world)
        optimizer.step()
        if step == args.corrupt_at_step and args.corrupt_node in (None, node):
            with torch.no_grad():  # a bad device: one replica's math silently goes wrong
                next(model.parameters()).add_(1e-3)
            log(f"corrupted my parameters at step {step} (--corrupt-at-step)")
        scheduled = step % args.checkpoint_every == 0 if args.checkpoint_every else \
            advised(step, last_save)
        try:  # every rank says so at a checkpoint's step: its vote verifies the checkpoint
            reports.step(step, {"loss": float(loss), "computeSeconds": compute},
                         fingerprint(list(model.parameters())), scheduled)
        except ReportError as err:  # reports are advisory: training goes on without them
            log(f"report of step {step} failed: {err}")
        if scheduled or save_now(step):  # agreed by every rank
            last_save = time.monotonic()
            if args.sharded or rank == 0:
                save(args, step, rank, world, {"step": step, "model": model.state_dict(),
                                               "optimizer": optimizer.state_dict()})
        if step % 10 == 0:
            log(f"step {step} loss {float(loss):.6f}")
        time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))

    reports.finish()
    final = fingerprint(list(model.parameters()))
    log(f"FINAL step={args.steps} fingerprint={final} reported={reports.sent}")
    results = os.environ.get("GOODPUT_CHECKPOINT_DIR")
    if results:
        folder = Path(results) / "final"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank-{rank}.json").write_text(json.dumps(
            {"step": args.steps, "fingerprint": final, "node": node,
             "attempt": int(os.environ.get("GOODPUT_RESTART", "0")), "resumedFrom": start}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
