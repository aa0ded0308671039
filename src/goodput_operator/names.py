"""Every `goodput.dev/*` name the operator writes on Kubernetes objects, and the environment
it gives workers: the contract other tools (kubectl, dashboards, workers, tests) rely on,
in one place. Code, tests and fixtures import these; none spells them out.
"""

from __future__ import annotations

PREFIX = "goodput.dev"

# ---- pods: what owns them and where they stand -----------------------------------------
JOB_LABEL = "goodput.dev/trainingjob"  # a TrainingJob's pods and children
RANK_LABEL = "goodput.dev/rank"  # the worker's rank in the gang
RESTART_LABEL = "goodput.dev/restart"  # the attempt (status.restarts) the pod belongs to
POD_SET_LABEL = "goodput.dev/pod-set"  # a companion pod's set (spec.podSets); workers: none
POD_INDEX_LABEL = "goodput.dev/pod-index"  # a companion pod's index in its set
ENDPOINT_LABEL = "goodput.dev/inferenceendpoint"  # an InferenceEndpoint's pods
REPLICA_LABEL = "goodput.dev/replica"  # the replica group's index
MEMBER_LABEL = "goodput.dev/member"  # the pod's place in its replica group
REVISION_LABEL = "goodput.dev/revision"  # hash of the endpoint's pod spec (rollouts)
ROLE_LABEL = "goodput.dev/role"  # leader or worker within a replica group
SERVING_ROLE_LABEL = "goodput.dev/serving-role"  # prefill or decode (disaggregated serving)
REGION_LABEL = "goodput.dev/region"  # a multi-region endpoint's replica: its region
GLOBAL_ENDPOINT_LABEL = "goodput.dev/global-endpoint"  # on its pods: the multi-region
# endpoint it serves (a regional Service selects them all by it); on a replica, its endpoint
GLOBAL_UID_ANNOTATION = "goodput.dev/global-endpoint-uid"  # and that endpoint's uid
PLACEMENT_GATE = "goodput.dev/placement"  # scheduling gate held until the gang is placed
# on a PriorityClass or WorkloadPriorityClass, the admin's grants (decide.priority): the
# namespaces that may use it, and the right to preempt other namespaces' jobs
PRIORITY_NAMESPACES_ANNOTATION = "goodput.dev/namespaces"
PREEMPT_ACROSS_ANNOTATION = "goodput.dev/preempt-across-namespaces"
NODE_ANNOTATION = "goodput.dev/node"  # a pinned pod's node: counted before it binds
DOMAIN_ANNOTATION = "goodput.dev/domain"  # the domain a pinned pod was placed in

# ---- probes --------------------------------------------------------------------------
PROBE_LABEL = "goodput.dev/probe"  # "true" on probe Jobs and their pods
PROBE_NODE_ANNOTATION = "goodput.dev/probe-node"  # an annotation: node names outgrow labels
PROBE_TRIGGER_LABEL = "goodput.dev/probe-trigger"  # start, suspicion, schedule, manual
ACCELERATORS_ANNOTATION = "goodput.dev/accelerators"  # on a pod that claims its devices by DRA:
# how many its claim asks for (placement counts them against the node; capped at a node's)
PROBE_EXPECTS_ANNOTATION = "goodput.dev/probe-expects"  # cuda|neuron|cpu, and how many:
# "cuda/8": what the run must exercise to count (health.probing)
PROBE_IMAGE_ANNOTATION = "goodput.dev/probe-image"  # the image it runs (the operator's cache
# keeps no container images): an inconclusive image is not run on the node again

# ---- nodes ---------------------------------------------------------------------------
GROUP_LABEL = "goodput.dev/group"  # the UltraServerGroup a node belongs to
NODE_DOMAIN_LABEL = "goodput.dev/domain"  # its domain (UltraServer, NVLink domain)
SLOT_LABEL = "goodput.dev/slot"  # its position in the domain, in fabric order
QUARANTINE_LABEL = "goodput.dev/quarantined"  # who quarantined it: operator or manual
QUARANTINE_TAINT = "goodput.dev/quarantine"  # NoSchedule while quarantined
EVIDENCE_ANNOTATION = "goodput.dev/quarantine-evidence"  # JSON: reason, evidence, since
HOLD_ENDED_ANNOTATION = "goodput.dev/hold-ended"  # a tenant's hold last ended: no new one soon
LEMON_ANNOTATION = "goodput.dev/lemon-score"  # quarantines so far, decayed: repeat offenders
LEMON_AT_ANNOTATION = "goodput.dev/lemon-at"  # when the lemon score was last raised

# ---- the operator itself -------------------------------------------------------------
LEADER_LABEL = "goodput.dev/leader"  # on the leading replica's pod: the report Service's
FINALIZER = "goodput.dev/finalizer"  # kopf's, should it ever add one (it does not)
REPORT_AUDIENCE = "goodput.dev/report"  # audience of the workers' projected tokens
REPORT_TOKEN_PATH = "/var/run/secrets/goodput.dev/report/token"

# ---- the worker environment (docs/training.md) ---------------------------------------
ENV_JOB = "GOODPUT_JOB"  # namespace/name of the TrainingJob
ENV_RESTART = "GOODPUT_RESTART"  # the attempt
ENV_RANK = "GOODPUT_RANK"
ENV_WORKERS = "GOODPUT_WORKERS"
ENV_POD_SET = "GOODPUT_POD_SET"
ENV_POD_INDEX = "GOODPUT_POD_INDEX"
ENV_CHECKPOINT_DIR = "GOODPUT_CHECKPOINT_DIR"
# the node-local checkpoint tier (the node's NVMe) for an object store dir (sdk.tiers)
ENV_CHECKPOINT_LOCAL = "GOODPUT_CHECKPOINT_LOCAL"
# the shared-filesystem tier between the node-local copy and the object store (sdk.tiers)
ENV_CHECKPOINT_SHARED = "GOODPUT_CHECKPOINT_SHARED"
ENV_RESUME_FROM = "GOODPUT_RESUME_FROM"  # the checkpoint to resume from ("" at the start)
ENV_RESUME_STEP = "GOODPUT_RESUME_STEP"
ENV_RESUME_DIGEST = "GOODPUT_RESUME_DIGEST"
ENV_HOSTFILE = "GOODPUT_HOSTFILE"  # the ranks' hosts, in rank order
ENV_REPORT_URL = "GOODPUT_REPORT_URL"  # the operator's report channel
ENV_REPORT_TOKEN = "GOODPUT_REPORT_TOKEN"  # path of the worker's report token
ENV_REPORT_CA = "GOODPUT_REPORT_CA"  # path of the CA bundle for an https report URL
ENV_PROBE_NODE = "GOODPUT_PROBE_NODE"  # the node a probe runs on
ENV_ENDPOINT = "GOODPUT_ENDPOINT"  # namespace/name of the InferenceEndpoint
ENV_ROLE = "GOODPUT_ROLE"
ENV_SERVING_ROLE = "GOODPUT_SERVING_ROLE"  # prefill or decode
ENV_REPLICA = "GOODPUT_REPLICA"
ENV_GROUP_SIZE = "GOODPUT_GROUP_SIZE"
ENV_WORKER_INDEX = "GOODPUT_WORKER_INDEX"
ENV_LEADER_ADDRESS = "GOODPUT_LEADER_ADDRESS"
ENV_MODEL_NAME = "GOODPUT_MODEL_NAME"
ENV_MODEL_SOURCE = "GOODPUT_MODEL_SOURCE"
ENV_PORT = "GOODPUT_PORT"
