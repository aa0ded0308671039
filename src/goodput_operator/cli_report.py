"""`goodput report`: every accelerator-hour of each UltraServerGroup, by state, namespace
and job (goodput_operator.report renders it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast


def add_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report", help="where each UltraServerGroup's accelerator-hours went: by state, "
                       "namespace and job, with costs when the group has a price",
        description="Reads each group's status.accounting (productive, serving, badput by "
                    "cause, idle, standby, spare, quarantined, unavailable, other, "
                    "unobserved: they add up to the whole) and the TrainingJobs' books.")
    report.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    report.add_argument("--group", action="append", help="only this group (repeatable)")
    report.add_argument("--json", action="store_true", help="print JSON instead of tables")
    report.add_argument("--svg", help="also write the chart as SVG to this file")


def run(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    from goodput_operator import report
    from goodput_operator.api.base import GROUP, VERSION

    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    custom = client.CustomObjectsApi(api)
    groups = cast(dict[str, Any], custom.list_cluster_custom_object(
        GROUP, VERSION, "ultraservergroups"))["items"]
    jobs = cast(dict[str, Any], custom.list_cluster_custom_object(
        GROUP, VERSION, "trainingjobs"))["items"]
    chosen = [g for g in groups if not args.group or g["metadata"]["name"] in args.group]
    if not chosen:
        print("no UltraServerGroup found" + (f" named {', '.join(args.group)}"
                                             if args.group else ""), file=sys.stderr)
        return 1
    reports = [report.summary(g, jobs) for g in sorted(chosen, key=lambda g: g["metadata"]
                                                       ["name"])]
    print(report.as_json(reports) if args.json else
          "\n\n".join(report.table(r) for r in reports))
    if args.svg:
        with open(args.svg, "w") as out:
            out.write(report.svg(reports))
        print(f"wrote {args.svg}", file=sys.stderr)
    return 0
