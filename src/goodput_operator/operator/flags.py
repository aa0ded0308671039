"""Every setting of the operator process, in one table: the command line, the environment
and the docs' table (docs/operating.md, written by `make generate`) all come from it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from goodput_operator import __version__


@dataclass(frozen=True)
class Flag:
    flag: str
    env: str
    default: str  # as the environment variable would give it
    kind: Literal["int", "str", "bool", "list"]
    help: str
    shown: str = ""  # the default as a person reads it, when the literal says less
    short: str = ""
    choices: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


FLAGS: tuple[Flag, ...] = (
    Flag("--namespace", "GOODPUT_NAMESPACES", "", "list",
         "act only on TrainingJobs and InferenceEndpoints in this namespace (repeatable; "
         "the variable is comma-separated); nodes, UltraServerGroups and the pods that hold "
         "devices are watched cluster-wide", shown="every namespace", short="-n"),
    Flag("--health-port", "GOODPUT_HEALTH_PORT", "8080", "int",
         "port of /healthz (liveness) and /readyz (readiness); 0: off"),
    Flag("--metrics-port", "GOODPUT_METRICS_PORT", "9090", "int",
         "port of /metrics ([reference](metrics.md)); 0: off"),
    Flag("--report-port", "GOODPUT_REPORT_PORT", "8081", "int",
         "port of the workers' report channel /v1/reports; 0: off"),
    Flag("--report-url", "GOODPUT_REPORT_URL", "", "str",
         "the URL workers reach the report channel at (given to their pods), e.g. "
         "https://goodput-operator-reports.goodput-system.svc:8081",
         shown="`http://127.0.0.1:<report-port>`"),
    Flag("--report-tls-cert", "GOODPUT_REPORT_TLS_CERT", "", "str",
         "serve the report channel over TLS with this certificate", shown="none"),
    Flag("--report-tls-key", "GOODPUT_REPORT_TLS_KEY", "", "str",
         "the certificate's private key", shown="none"),
    Flag("--report-ca", "GOODPUT_REPORT_CA_FILE", "", "str",
         "the CA bundle workers and probes check the report channel's certificate against "
         "(given to them beside the hostfile and in the probe namespace); a missing file "
         "falls back to the certificate itself (self-signed)",
         shown="`--report-tls-cert`"),
    Flag("--reports-per-job", "GOODPUT_REPORTS_PER_JOB", "500", "int",
         "the most step reports a second the leader asks of one job: above it the job's "
         "workers report every k-th step, k a power of two "
         "([the report channel at scale](#the-report-channel-at-scale))"),
    Flag("--probe-namespace", "GOODPUT_PROBE_NAMESPACE", "goodput-system", "str",
         "namespace of the SDC probe Jobs (its pods may report probes)"),
    Flag("--probe-image", "GOODPUT_PROBE_IMAGE", f"goodput-operator:{__version__}", "str",
         "image of the probe Jobs (default: the operator's own)",
         shown="`goodput-operator:<version>`"),
    Flag("--prometheus-url", "GOODPUT_PROMETHEUS_URL", "http://127.0.0.1:9090", "str",
         "Prometheus for autoscaling (an endpoint's scaling.prometheusUrl overrides it)"),
    Flag("--prometheus-allow", "GOODPUT_PROMETHEUS_ALLOW", "", "list",
         "URL prefixes an endpoint's scaling.prometheusUrl may name besides --prometheus-url "
         "(repeatable; comma-separated in the variable): scheme and host, optionally port "
         "and path, e.g. http://prometheus.monitoring.svc", shown="none"),
    Flag("--sd-auth", "GOODPUT_SD_AUTH", "true", "bool",
         "answer /sd/serving (the serving pods Prometheus discovers) only for a bearer token "
         "whose user may `get` the non-resource URL /sd/serving (TokenReview and "
         "SubjectAccessReview; the chart binds it to `serviceDiscovery.readers`); "
         "`--no-sd-auth`: anyone who reaches the health port", shown="on"),
    Flag("--standby-domains-per-namespace", "GOODPUT_STANDBY_DOMAINS_PER_NAMESPACE", "8",
         "int", "the most standby domains (InferenceEndpoint scaling.standbyDomains) all of one "
         "namespace's endpoints may hold together: standby is held outside any quota"),
    Flag("--searches-per-namespace", "GOODPUT_SEARCHES_PER_NAMESPACE", "32", "int",
         "placement searches one pass runs for one namespace's TrainingJobs (and as many "
         "for its InferenceEndpoints) that wait for placement: those searched longest ago "
         "go first, the others keep their last answer, so one namespace's backlog does not "
         "slow every pass"),
    Flag("--require-queue", "GOODPUT_REQUIRE_QUEUE", "", "list",
         "in this namespace (repeatable; `*`: every namespace) a TrainingJob or "
         "InferenceEndpoint without a `kueue.x-k8s.io/queue-name` label is held Pending "
         "(Admitted=False, reason QueueRequired), as Kueue's manageJobsWithoutQueueName",
         shown="none"),
    Flag("--haproxy-runtime-api", "GOODPUT_HAPROXY_RUNTIME_API", "", "str",
         "route the requests of multi-region InferenceEndpoints through this HAProxy: its "
         "runtime API (`unix:/path` or `HOST:PORT`, the stats socket at level admin). For "
         "each endpoint routed the admin declares a backend `<namespace>.<name>` with a "
         "server per region, named after it, at that region's entry; the operator sets "
         "their weights ([routing](multicluster.md#routing-requests-across-regions))",
         shown="none (routing off)"),
    Flag("--cluster-name", "GOODPUT_CLUSTER_NAME", "", "str",
         "this cluster's name, written into every TrainingJob's and InferenceEndpoint's "
         "status.cluster: under MultiKueue the status is copied to the manager, which then "
         "says where each runs ([multi-cluster](multicluster.md))", shown="none"),
    Flag("--leader-election", "GOODPUT_LEADER_ELECTION", "false", "bool",
         "run as one of several replicas: only the holder of the Lease acts, the others "
         "keep their caches warm and take over", shown="off"),
    Flag("--lease-namespace", "GOODPUT_LEASE_NAMESPACE", "", "str",
         "namespace of the leader-election Lease",
         shown="`$POD_NAMESPACE`, else `goodput-system`"),
    Flag("--lease-name", "GOODPUT_LEASE_NAME", "goodput-operator", "str",
         "name of the leader-election Lease"),
    Flag("--log-format", "GOODPUT_LOG_FORMAT", "text", "str",
         "text, or json for one JSON object per line", choices=("text", "json")),
    Flag("--verbose", "GOODPUT_VERBOSE", "false", "bool",
         "debug logs, one line per watch event", shown="off", short="-v"),
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag, its default taken from its environment variable when that is set."""
    for flag in FLAGS:
        raw = os.environ.get(flag.env, flag.default)
        names = [flag.flag, *([flag.short] if flag.short else [])]
        text = f"{flag.help} [{flag.env}]"
        if flag.kind == "list":
            parser.add_argument(*names, action="append", help=text,
                                default=[item for item in raw.split(",") if item])
        elif flag.kind == "bool":
            parser.add_argument(*names, action=argparse.BooleanOptionalAction, help=text,
                                default=raw == "true")
        else:
            parser.add_argument(*names, type=int if flag.kind == "int" else str, help=text,
                                default=int(raw) if flag.kind == "int" else raw,
                                choices=flag.choices or None)


def _environment(flag: Flag) -> str:
    if flag.kind == "bool":
        return f"`{flag.env}=true`"
    return f"`{flag.env}`" + (" (comma-separated)" if flag.kind == "list" else "")


def table(flags: Sequence[Flag] = FLAGS) -> str:
    """The Markdown table of docs/operating.md."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for flag in flags:
        shown = flag.shown or (f"`{flag.default}`" if flag.default else "none")
        rows.append(f"| `{flag.flag}` | {_environment(flag)} | {shown} | {flag.help} |")
    return "\n".join(rows) + "\n"
