"""`goodput-operator`: the operator process.

Runs kopf with our handlers: watches UltraServerGroups, TrainingJobs, nodes and pods,
serves /healthz (kopf's liveness probe), /metrics (Prometheus) and the workers' report
channel (/v1/reports, authenticated by TokenReview). Configuration by flags or
environment (GOODPUT_NAMESPACES, GOODPUT_HEALTH_PORT, GOODPUT_METRICS_PORT,
GOODPUT_REPORT_PORT, GOODPUT_REPORT_URL, GOODPUT_REPORT_TLS_CERT/KEY, GOODPUT_LOG_FORMAT);
`--help` lists them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import ssl
import sys
from collections.abc import Sequence

import kopf
from prometheus_client import start_http_server

from goodput_operator import __version__


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {"time": self.formatTime(record), "level": record.levelname,
                   "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="goodput-operator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", "-n", action="append",
                        default=[n for n in env("GOODPUT_NAMESPACES", "").split(",") if n],
                        help="watch only this namespace (repeatable); default: all")
    parser.add_argument("--health-port", type=int, default=int(env("GOODPUT_HEALTH_PORT",
                                                                  "8080")),
                        help="port of /healthz (0: off)")
    parser.add_argument("--metrics-port", type=int, default=int(env("GOODPUT_METRICS_PORT",
                                                                   "9090")),
                        help="port of /metrics (0: off)")
    parser.add_argument("--report-port", type=int, default=int(env("GOODPUT_REPORT_PORT",
                                                                  "8081")),
                        help="port of the workers' report channel /v1/reports (0: off)")
    parser.add_argument("--report-url", default=env("GOODPUT_REPORT_URL", ""),
                        help="the URL workers reach the report channel at (given to their "
                             "pods), e.g. https://goodput-operator.goodput-system.svc:8081")
    parser.add_argument("--report-tls-cert", default=env("GOODPUT_REPORT_TLS_CERT"),
                        help="serve the report channel over TLS with this certificate")
    parser.add_argument("--report-tls-key", default=env("GOODPUT_REPORT_TLS_KEY"),
                        help="the certificate's private key")
    parser.add_argument("--probe-namespace", default=env("GOODPUT_PROBE_NAMESPACE",
                                                         "goodput-system"),
                        help="namespace of the SDC probe Jobs (its pods may report probes)")
    parser.add_argument("--probe-image", default=env("GOODPUT_PROBE_IMAGE",
                                                     f"goodput-operator:{__version__}"),
                        help="image of the probe Jobs (default: the operator's own)")
    parser.add_argument("--prometheus-url", default=env("GOODPUT_PROMETHEUS_URL",
                                                        "http://127.0.0.1:9090"),
                        help="Prometheus for autoscaling (an endpoint's "
                             "scaling.prometheusUrl overrides it)")
    parser.add_argument("--log-format", choices=["text", "json"],
                        default=env("GOODPUT_LOG_FORMAT", "text"))
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if args.log_format == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        handlers=[handler], force=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    if not args.verbose:  # one line per handled watch event is noise at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from kubernetes.config import ConfigException

    from goodput_operator.controllers import handlers  # registers the handlers
    from goodput_operator.controllers.kube import Kube

    try:
        handlers.KUBE = Kube()
    except ConfigException as err:
        print(f"goodput-operator: error: no cluster to talk to ({err}); run it in a pod with "
              "a service account, or set KUBECONFIG", file=sys.stderr)
        return 2

    handlers.REPORT_PORT = args.report_port
    handlers.STATE.probe_namespace = args.probe_namespace
    handlers.STATE.probe_image = args.probe_image
    handlers.STATE.prometheus_url = args.prometheus_url
    handlers.STATE.report_url = args.report_url or (
        f"http://127.0.0.1:{args.report_port}" if args.report_port else "")
    if args.report_tls_cert:
        handlers.REPORT_TLS = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        handlers.REPORT_TLS.load_cert_chain(args.report_tls_cert, args.report_tls_key)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr="0.0.0.0")
    liveness = f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None
    namespaces = args.namespace or None
    try:
        asyncio.run(kopf.operator(
            standalone=True, clusterwide=namespaces is None, namespaces=namespaces or (),
            liveness_endpoint=liveness))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
