"""Goodput at any scale, before buying it: a discrete-event simulator of a fleet running
TrainingJobs through failures, deciding with the operator's own pure functions, beside
baseline policies (Kubernetes defaults, Kueue's hot swap, HyperPod-like). `goodput plan`
and bench/goodput.py run it; docs/planning.md explains the model and its defaults.

Pure: no Kubernetes client, no kopf, no clock but its own.
"""
