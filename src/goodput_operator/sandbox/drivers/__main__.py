"""`python -m goodput_operator.sandbox.drivers --kubeconfig K`: the simulated DRA driver
controller of the sandbox (see the package's docstring), a pass every half second until
stopped."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from goodput_operator.sandbox import drivers

log = logging.getLogger("goodput.sandbox.drivers")


def reconcile(custom: Any, core: Any) -> None:
    """One pass: every ComputeDomain gets its channel template and a current status."""
    domains = custom.list_cluster_custom_object(*drivers.DOMAINS)["items"]
    if not domains:
        return
    templates = {(t["metadata"]["namespace"], t["metadata"]["name"])
                 for t in custom.list_cluster_custom_object(*drivers.TEMPLATES)["items"]}
    claims = custom.list_cluster_custom_object(*drivers.CLAIMS)["items"]
    cliques = {n.metadata.name: (n.metadata.labels or {}).get(drivers.CLIQUE_LABEL, "")
               for n in core.list_node(label_selector=drivers.CLIQUE_LABEL).items}
    for domain in domains:
        meta = domain["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        template = drivers.channel_template(domain)
        if (meta["namespace"], template["metadata"]["name"]) not in templates:
            group, version, plural = drivers.TEMPLATES
            custom.create_namespaced_custom_object(group, version, meta["namespace"], plural,
                                                   template)
            log.info("%s/%s: channel template %s", meta["namespace"], meta["name"],
                     template["metadata"]["name"])
        status = drivers.domain_status(domain, claims, cliques)
        if status != domain.get("status"):
            group, version, plural = drivers.DOMAINS
            custom.patch_namespaced_custom_object_status(
                group, version, meta["namespace"], plural, meta["name"], {"status": status})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    while True:
        try:
            reconcile(custom, core)
        except ApiException as err:  # a conflict, a restart of the API server: next pass
            log.warning("pass failed: %s %s", err.status, err.reason)
        except OSError as err:
            log.warning("API server unreachable: %s", err)
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
