"""Report channel benchmark: workers' step reports into the leader, at the rate a
Rainier-sized job sends them.

    python -m bench.reports [--quick] [--json] [--workers N] [--rates R,R,...] [--seconds S]

A sandbox with a synthetic Trn2 fleet runs one TrainingJob of N workers (KWOK pods, one
chip each, the SDC cross-replica check on); every worker gets a real bound token
(TokenRequest for its pod, audience goodput.dev/report) and reports from an address of its
own (127.x.y.z: the per-source limit on new tokens sees one worker per address, as pods
have). A driver process sends the example trainer's step report (loss and a parameter
fingerprint, one vote per step) from every worker at a fixed rate, each worker with one
report in flight (the SDK blocks the step on it), over one kept-alive connection per worker
(or, --close, a new connection per report as the SDK's urllib makes). Each rate level is
held for S seconds; measured per level: reports/s sustained, latency p50/p99, the
operator's CPU (cores busy, CPU-ms per report) and RSS, TokenReviews sent.

The load to carry (issue 22): a 31,000-worker job at a 5 s step sends 6,200 reports/s if
every worker reports every step. Last, that load is offered again with the workers
reporting every k-th step as the leader's answers ask (health.cadence, as the SDK does):
what the channel carries of a Rainier-sized job.
Baseline, measured in the same run by the same driver: a bare aiohttp server that reads
each body as JSON and answers {"accepted": true} (no token, no state) — what Python's HTTP
stack on this machine carries at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.harness import OperatorProcess, cpu_seconds, free_port, rss_mb, sandbox, wait_until
from bench.scale import minus, pass_buckets, quantile
from goodput_operator import names
from goodput_operator.health.cadence import WINDOW_SECONDS, report_every
from goodput_operator.sandbox import cluster
from goodput_operator.sdk import spread_phase

NAME = "bench-reports"
NAMESPACE = "reports"
JOB = "reporters"
TARGET_RATE = 31_000 / 5.0  # reports/s: 31k workers, a 5 s step
TARGET_P99 = 0.100  # seconds
WARM_RATE = 400.0  # first reports a second (each a TokenReview) in the warm-up: 2,048 first
# reports at 410/s were all accepted on this machine (p99 0.3 s)
# with the cadence: k settles. The leader judges k every window (5 s) from what arrived, and
# a gang the leader's answers hold back shows it only part of its load: k doubles a window
# at a time, 1 to 16 in four
SETTLE_SECONDS = 4 * WINDOW_SECONDS + 1.0
GC = "goodput_gc_pause_seconds"
GROUP = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
         "metadata": {"name": "reports-trn2"},
         "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
                  "domainLabel": "topology.k8s.aws/ultraserver-id",
                  "accelerator": {"resource": "aws.amazon.com/neuron", "perNode": 16},
                  "nodesPerDomain": 4, "probes": {"schedule": ""}}}


def training_job(workers: int) -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": JOB, "namespace": NAMESPACE},
            "spec": {"ultraServerGroup": "reports-trn2", "workers": workers,
                     "acceleratorsPerWorker": 1, "sdc": {"crossReplicaCheck": True},
                     "template": {"spec": {"containers": [
                         {"name": "main", "image": "example.com/trainer:1"}]}}}}


def settle_seconds(workers: int, rate: float) -> float:
    """How long k takes to settle for WORKERS offering RATE reports a second (every step):
    SETTLE_SECONDS, and then k steps for every worker to hear it in an answer (a worker at
    k reports once every k steps: 21 s more for 8,192 workers at Rainier's rate)."""
    return SETTLE_SECONDS + report_every(1, rate) * workers / rate


def source_address(index: int) -> str:
    """A loopback address of worker INDEX's own (all of 127/8 is this host)."""
    return f"127.10.{index // 250}.{1 + index % 250}"


# ---- the driver (a process of its own: its CPU is not the server's) -----------------------
async def _drive(url: str, workers: list[dict[str, str]], rate: float, seconds: float,
                 keepalive: bool, cadence: str | None = None,
                 settle: float = SETTLE_SECONDS) -> dict[str, Any]:
    """Each worker steps at RATE/len(WORKERS) a second and reports every step, or with
    CADENCE every k-th as the answers say: "spread", each rank its spread_phase of steps
    after the voted step (as the SDK does), or "burst", every rank at the voted step (as
    the SDK did); then the first SETTLE seconds (every worker at k=1 until the leader has
    counted a window of reports) are measured apart."""
    import aiohttp

    latencies: list[float] = []
    settling: list[float] = []  # with CADENCE: before the leader's k has settled
    slots: list[int] = []  # the reports each worker had to send in the window
    codes: dict[str, int] = {}
    asked: list[int] = []  # the k each worker was last asked for
    interval = len(workers) / rate  # each worker's step time at this rate
    started = time.perf_counter()
    settled = started + (settle if cadence else 0.0)
    deadline = settled + seconds

    async def worker(index: int, who: dict[str, str]) -> None:
        connector = aiohttp.TCPConnector(limit=1, force_close=not keepalive,
                                         local_addr=(source_address(index), 0))
        headers = {"Authorization": f"Bearer {who['token']}"}
        offset = interval * index / len(workers)  # the gang's reports spread over a step
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            step, every = 0, 1
            while True:
                # the gang's step at this time (the ranks step together, as their
                # collectives make them); a rank behind skips to it: its reports of the
                # missed steps are lost, as a late worker's would be
                step = max(step + 1, int((time.perf_counter() - started) / interval) + 1)
                at = started + (step - 1) * interval + offset
                # the window holds the slots due before its end, even one a loaded
                # machine wakes for late: open loop, as the offered rate is reckoned
                if at >= deadline:
                    due = 0  # the slots before the deadline, reckoned as `at` is
                    while started + due * interval + offset < deadline:
                        due += 1
                    slots.append(due)
                    asked.append(every)
                    return
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                voted = step - (spread_phase(index, every) if cadence == "spread" else 0)
                if voted < 1 or voted % every:
                    continue  # no voted step's report is this rank's to send now
                body = {"step": voted, "metrics": {"loss": 1.0 / step},
                        "fingerprint": "f" * 16, "shard": "0", "rank": index}
                sent = time.perf_counter()
                try:
                    async with session.post(url, json=body) as response:
                        answer = await response.read()
                        code = str(response.status)
                    if cadence and code == "200":
                        every = int(json.loads(answer).get("every") or 1)
                except aiohttp.ClientError as err:
                    code = type(err).__name__
                (latencies if sent >= settled else settling).append(
                    time.perf_counter() - sent)
                if sent >= settled:
                    codes[code] = codes.get(code, 0) + 1

    await asyncio.gather(*(worker(i, w) for i, w in enumerate(workers)))
    latencies.sort()

    def pct(q: float, values: list[float] = latencies) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
    result = {"rate": rate, "sent": len(latencies),
              "per_s": round(len(latencies) / seconds, 1),
              "offered_per_s": round(sum(slots) / (seconds + settled - started), 1),
              "p50_ms": round(pct(0.50) * 1000, 2), "p99_ms": round(pct(0.99) * 1000, 2),
              "codes": codes}
    if cadence:
        settling.sort()
        result["every"] = sorted(set(asked))
        result["settling"] = {"seconds": round(settle, 1), "sent": len(settling),
                              "p99_ms": round(pct(0.99, settling) * 1000, 2)}
    return result


def drive_main(args: argparse.Namespace) -> int:
    workers = json.loads(Path(args.drive).read_text())
    print(json.dumps(asyncio.run(_drive(args.url, workers, args.rate, args.seconds,
                                        not args.close, args.cadence or None,
                                        settle_seconds(len(workers), args.rate)))))
    return 0


# ---- the bare baseline server -------------------------------------------------------------
def bare_main(port: int) -> int:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        json.loads(await request.read())
        return web.json_response({"accepted": True})

    app = web.Application()
    app.router.add_post("/v1/reports/{kind}", handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
    return 0


# ---- the run ------------------------------------------------------------------------------
def mint_tokens(box: cluster.Sandbox, workers: int) -> list[dict[str, str]]:
    """A bound report token for every worker pod of the job, in rank order."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(box.kubeconfig)))  # type: ignore[no-untyped-call]
    pods: list[Any] = api.list_namespaced_pod(
        NAMESPACE, label_selector=f"{names.JOB_LABEL}={JOB}").items
    pods.sort(key=lambda p: int(p.metadata.labels[names.RANK_LABEL]))
    assert len(pods) == workers, f"{len(pods)} worker pods, expected {workers}"

    def mint(pod: Any) -> dict[str, str]:
        ref = client.V1BoundObjectReference(kind="Pod", api_version="v1",
                                            name=pod.metadata.name, uid=pod.metadata.uid)
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[names.REPORT_AUDIENCE], expiration_seconds=3600,
            bound_object_ref=ref))
        made: Any = api.create_namespaced_service_account_token(
            pod.spec.service_account_name or "default", NAMESPACE, request)
        return {"pod": pod.metadata.name, "token": made.status.token}

    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(mint, pods))


def level(url: str, tokens: Path, rate: float, seconds: float, close: bool,
          pid: int | None, cadence: str | None = None) -> dict[str, Any]:
    """One rate held for SECONDS: the driver's figures and, with PID, the server's CPU.
    CADENCE: the workers report every k-th step, as the leader's answers ask ("spread" or
    "burst", see _drive)."""
    cpu0 = cpu_seconds(pid) if pid else 0.0
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "bench.reports", "--drive", str(tokens),
                          "--url", url, "--rate", str(rate), "--seconds", str(seconds),
                          *(["--close"] if close else []),
                          *(["--cadence", cadence] if cadence else [])],
                         capture_output=True, text=True, timeout=seconds + 600, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    if pid:
        busy = cpu_seconds(pid) - cpu0
        result["server_cores"] = round(busy / (time.monotonic() - t0), 2)
        result["server_cpu_ms_per_report"] = round(1000 * busy / max(1, result["sent"]), 3)
        result["server_rss_mb"] = round(rss_mb(pid)[0], 1)
    wanted = result["per_s"] if cadence else result["offered_per_s"]  # k is the leader's
    result["sustained"] = (result["per_s"] >= 0.95 * wanted and
                           result["p99_ms"] <= TARGET_P99 * 1000 and
                           set(result["codes"]) == {"200"})
    return result


def ramp(url: str, tokens: Path, rates: Sequence[float], seconds: float, close: bool,
         pid: int | None, label: str) -> list[dict[str, Any]]:
    results = []
    for rate in rates:
        result = level(url, tokens, rate, seconds, close, pid)
        print(f"# {label} at {rate:.0f}/s: {result['per_s']}/s, p50 {result['p50_ms']} ms, "
              f"p99 {result['p99_ms']} ms, codes {result['codes']}"
              + (f", server {result['server_cores']} cores, "
                 f"{result['server_cpu_ms_per_report']} CPU-ms/report"
                 if pid else ""), file=sys.stderr, flush=True)
        results.append(result)
        if result["per_s"] < 0.8 * rate:
            break  # saturated: a higher rate says nothing more
    return results


def measure(workers: int, rates: Sequence[float], seconds: float, close: bool
            ) -> dict[str, Any]:
    result: dict[str, Any] = {"workers": workers, "seconds_per_level": seconds,
                              "keepalive": not close, "target_per_s": TARGET_RATE,
                              "target_p99_ms": TARGET_P99 * 1000}
    domains = max(2, -(-workers // 64) + 1)
    with sandbox(NAME, f"synthetic:trn2:{domains}", GROUP, [NAMESPACE],
                 wait_seconds=600) as box, tempfile.TemporaryDirectory() as tmp:
        operator = OperatorProcess(box, Path(box.home) / "operator.log")
        port = free_port()
        while port in (operator.metrics_port, operator.health_port):
            port = free_port()
        operator.report_args = ["--report-port", str(port),
                                "--report-url", f"http://127.0.0.1:{port}"]
        operator.start()
        bare_port = free_port()  # started now: the driver's many connections take ports
        while bare_port in (port, operator.metrics_port, operator.health_port):
            bare_port = free_port()
        bare = subprocess.Popen([sys.executable, "-m", "bench.reports", "--bare",
                                 str(bare_port)])
        try:
            wait_until(operator.ready, 300, "operator ready")
            box.kubectl("apply", "--server-side", "-f", "-",
                        input_text=json.dumps(training_job(workers)))

            def running() -> bool:
                out = box.kubectl("get", "tj", JOB, "-n", NAMESPACE, "-o",
                                  "jsonpath={.status.phase}", check=False)
                return out.stdout.strip() == "Running"
            wait_until(running, 900, f"{workers} workers running", 2.0)
            tokens = Path(tmp) / "tokens.json"
            started = time.monotonic()
            tokens.write_text(json.dumps(mint_tokens(box, workers)))
            result["mint_s"] = round(time.monotonic() - started, 1)
            url = f"http://127.0.0.1:{port}/v1/reports/step"
            reviews0 = _reviews(operator)
            # every token's first report: its TokenReview (one report per worker), at most
            # WARM_RATE a second (what the review threads carried: beyond it, 503s)
            rate = min(workers / 5.0, WARM_RATE)
            warm = level(url, tokens, rate, workers / rate, close, operator.pid)
            result["warmup"] = {**warm, "token_reviews": _reviews(operator) - reviews0}
            reviews0 = _reviews(operator)
            cpu0, t0 = cpu_seconds(operator.pid), time.monotonic()
            time.sleep(10)  # the operator's own work with no reports (its passes)
            idle = (cpu_seconds(operator.pid) - cpu0) / (time.monotonic() - t0)
            result["idle_cores"] = round(idle, 3)
            before = operator.metrics()
            result["levels"] = ramp(url, tokens, rates, seconds, close, operator.pid, "ours")
            after = operator.metrics()
            passes = minus(pass_buckets(after), pass_buckets(before))
            result["pass_p50_s"] = round(quantile(passes, 0.5), 3)
            result["pass_p99_s"] = round(quantile(passes, 0.99), 3)
            full = minus(*(pass_buckets({k: v for k, v in samples.items()
                                         if 'generation="2"' in k}, GC)
                           for samples in (after, before)))
            result["gc_full"] = {"count": int(full.get(float("inf"), 0)),
                                 "p50_s": round(quantile(full, 0.5), 3),
                                 "max_bucket_s": longest(full)}
            for lv in result["levels"]:  # what the reports themselves cost
                lv["report_cpu_ms"] = round(1000 * (lv["server_cores"] - idle) * seconds
                                            / max(1, lv["sent"]), 3)
            # the Rainier job's load per job (every step), the workers reporting every
            # k-th step as the leader asks: what the channel carries of it, each rank's
            # report at its phase (the SDK), and all at the voted step (the SDK before)
            result["cadence"] = level(url, tokens, TARGET_RATE, seconds, close,
                                      operator.pid, cadence="spread")
            result["cadence_burst"] = level(url, tokens, TARGET_RATE, seconds, close,
                                            operator.pid, cadence="burst")
            result["token_reviews_during_levels"] = _reviews(operator) - reviews0
            result["rss_mb"] = dict(zip(("now", "peak"), rss_mb(operator.pid), strict=True))
            wait_until(lambda: _listening(bare_port), 30, "bare server")
            result["baseline"] = ramp(f"http://127.0.0.1:{bare_port}/v1/reports/step",
                                      tokens, rates, seconds, close, bare.pid, "bare")
        finally:
            bare.terminate()
            operator.stop()
    result["sustained_per_s"] = max((r["per_s"] for r in result["levels"] if r["sustained"]),
                                    default=0.0)
    result["baseline_per_s"] = max((r["per_s"] for r in result["baseline"]), default=0.0)
    busiest = max(result["levels"], key=lambda r: r["per_s"])
    result["cores_for_target"] = round(busiest["report_cpu_ms"] * TARGET_RATE / 1000
                                       + result["idle_cores"], 2)
    return result


def longest(buckets: dict[float, float]) -> float:
    """The smallest bucket bound of cumulative BUCKETS that holds every observation: the
    longest one took at most that (0 when there were none)."""
    count = buckets.get(float("inf"), 0.0)
    return min((b for b, n in buckets.items() if n >= count and count), default=0.0)


def _reviews(operator: Any) -> float:
    samples: dict[str, float] = operator.metrics()
    return sum(v for k, v in samples.items() if k.startswith("goodput_token_reviews_total"))


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def table(r: dict[str, Any]) -> str:
    lines = [f"{r['workers']} workers, {r['seconds_per_level']:.0f} s per level, "
             f"{'kept-alive connections' if r['keepalive'] else 'a connection per report'}",
             f"the leader idle (its passes, no reports): {r['idle_cores']} cores; its "
             f"passes during the levels: p50 {r['pass_p50_s']} s, p99 {r['pass_p99_s']} s; "
             f"full garbage collections: {r['gc_full']['count']}, median "
             f"{r['gc_full']['p50_s']} s, the longest up to {r['gc_full']['max_bucket_s']} s",
             "", "| offered /s | ours /s | p50 ms | p99 ms | leader cores | CPU-ms/report "
             "(above idle) | bare /s | bare p99 ms | bare CPU-ms/report | ratio ours/bare |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    bare = {b["rate"]: b for b in r["baseline"]}
    for lv in r["levels"]:
        b = bare.get(lv["rate"], {})
        ratio = f"{lv['per_s'] / b['per_s']:.2f}x" if b.get("per_s") else ""
        lines.append(f"| {lv['rate']:.0f} | {lv['per_s']} | {lv['p50_ms']} | {lv['p99_ms']} "
                     f"| {lv['server_cores']} | {lv['report_cpu_ms']} "
                     f"| {b.get('per_s', '')} | {b.get('p99_ms', '')} "
                     f"| {b.get('server_cpu_ms_per_report', '')} | {ratio} |")
    lines += ["", f"sustained (>= 95% of offered, p99 <= {TARGET_P99 * 1000:.0f} ms, all 200): "
              f"{r['sustained_per_s']}/s; target {TARGET_RATE:.0f}/s; "
              f"leader cores the target needs at the measured cost (idle + reports): "
              f"{r['cores_for_target']}",
              *(f"the Rainier job's load ({TARGET_RATE:.0f}/s, every step), its workers "
                f"reporting every k-th step as the leader asks, {how} (k = "
                f"{', '.join(map(str, c['every']))}): {c['per_s']}/s, p50 {c['p50_ms']} ms, "
                f"p99 {c['p99_ms']} ms, codes {c['codes']}, leader {c['server_cores']} "
                f"cores; the first {c['settling'].get('seconds', SETTLE_SECONDS):.0f} s, "
                f"before k settled: "
                f"{c['settling']['sent']} reports, p99 {c['settling']['p99_ms']} ms"
                for how, c in (("each rank at its phase", r["cadence"]),
                               ("every rank at the voted step", r["cadence_burst"]))),
              f"p99, at the voted step / at the phase: "
              f"{r['cadence_burst']['p99_ms'] / max(0.01, r['cadence']['p99_ms']):.1f}x",
              f"warm-up (each token's first report, its TokenReview): "
              f"{r['warmup']['token_reviews']:.0f} reviews, p99 {r['warmup']['p99_ms']} ms; "
              f"TokenReviews during the levels: {r['token_reviews_during_levels']:.0f}",
              f"tokens minted in {r['mint_s']} s; operator RSS {r['rss_mb']['now']:.0f} MiB "
              f"(peak {r['rss_mb']['peak']:.0f})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="256 workers, 3 levels of 10 s (about 3 minutes)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--workers", type=int, default=2048)
    parser.add_argument("--rates", default="500,1000,2000,4000,6200")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--close", action="store_true",
                        help="a new connection per report (the SDK's urllib today)")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # the driver process
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cadence", choices=("spread", "burst"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        return drive_main(args)
    if args.bare:
        return bare_main(args.bare)
    workers, seconds = (256, 10.0) if args.quick else (args.workers, args.seconds)
    rates = [250.0, 500.0, 1000.0] if args.quick else \
        [float(r) for r in args.rates.split(",")]
    result = measure(workers, rates, seconds, args.close)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
