"""`goodput-operator`: the operator process.

Runs kopf with our handlers: watches UltraServerGroups, TrainingJobs, InferenceEndpoints,
nodes and pods; serves /healthz and /readyz, /metrics (Prometheus) and the workers' report
channel (/v1/reports, authenticated by TokenReview). Every flag has an environment variable
(shown in brackets); the flag wins. docs/operating.md lists them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import ssl
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import kopf
from prometheus_client import start_http_server

from goodput_operator.operator import runtime
from goodput_operator.operator.flags import add_flags


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {"time": self.formatTime(record), "level": record.levelname,
                   "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="goodput-operator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser)
    args = parser.parse_args(argv)
    if args.reports_per_job < 1:
        parser.error(f"--reports-per-job must be at least 1, not {args.reports_per_job}")
    args.lease_namespace = (args.lease_namespace or os.environ.get("POD_NAMESPACE")
                            or "goodput-system")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    env_get = os.environ.get
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

    from goodput_operator.controllers.kube import Kube
    from goodput_operator.operator import handlers  # registers the handlers

    options = handlers.OPTIONS
    try:
        options.kube = Kube()
    except ConfigException as err:
        print(f"goodput-operator: error: no cluster to talk to ({err}); run it in a pod with "
              "a service account, or set KUBECONFIG", file=sys.stderr)
        return 2

    options.report_port = args.report_port
    options.reports_per_job = args.reports_per_job
    options.health_port = args.health_port
    options.sd_auth = args.sd_auth
    options.namespaces = args.namespace or None
    options.leader_election = args.leader_election
    options.lease_namespace, options.lease_name = args.lease_namespace, args.lease_name
    options.pod_namespace = env_get("POD_NAMESPACE", "")
    options.pod_name = env_get("POD_NAME", "")
    # unique per process, as client-go's: a restarted container must not inherit the lease
    options.identity = f"{options.pod_name or options.identity}_{uuid.uuid4().hex[:8]}"
    handlers.STATE.settings.probe_namespace = args.probe_namespace
    handlers.STATE.settings.probe_image = args.probe_image
    handlers.STATE.settings.prometheus_url = args.prometheus_url
    handlers.STATE.settings.cluster_name = args.cluster_name
    handlers.STATE.settings.require_queue = frozenset(args.require_queue)
    handlers.STATE.settings.standby_per_namespace = max(0, args.standby_domains_per_namespace)
    handlers.STATE.settings.searches_per_namespace = max(1, args.searches_per_namespace)
    handlers.STATE.settings.prometheus_allow = list(args.prometheus_allow)
    handlers.STATE.settings.haproxy_runtime_api = args.haproxy_runtime_api
    handlers.STATE.settings.report_url = args.report_url or (
        f"http://127.0.0.1:{args.report_port}" if args.report_port else "")
    if args.report_tls_cert:
        options.report_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        options.report_tls.load_cert_chain(args.report_tls_cert, args.report_tls_key)
        ca = Path(args.report_ca) if args.report_ca else None
        handlers.STATE.settings.report_ca = (ca if ca is not None and ca.is_file()
                                    else Path(args.report_tls_cert)).read_text()
    if args.metrics_port:
        start_http_server(args.metrics_port, addr="0.0.0.0")
        runtime.time_collections()
    namespaces = options.namespaces
    try:
        asyncio.run(kopf.operator(
            standalone=True, clusterwide=namespaces is None, namespaces=namespaces or (),
            stop_flag=options.stop))
    except KeyboardInterrupt:
        return 130
    return 1 if options.lost_leadership else 0


if __name__ == "__main__":
    sys.exit(main())
