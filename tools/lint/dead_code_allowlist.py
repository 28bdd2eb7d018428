"""Names vulture reports as unused that something outside Python's view uses (`make lint`).

Each group says who uses them. Anything else vulture finds is dead code: delete it, or add it here with
the reason.
"""

# ruff: noqa: B018, F821
# pyright: reportUndefinedVariable=false

# Fields of pydantic models read by name from YAML or JSON: the CRD's tolerations, the chart's values
# (rendered into values.yaml and read by the chart's templates), the builder's result format.
effect
toleration_seconds
pull_policy
enabled
engine_builder
service_monitor
serving_pod_monitor
watch_namespaces
crds
service_account
admission_warnings
user_roles
write_guard
dashboards
label_value
pod_annotations
replica_count
renew_deadline_seconds
retry_period_seconds
tensorrt_llm_assumed

# Fields of the CRD only its CEL rules read (at admission, and offline in `mmctl validate`).
max_gpus

# Facts about each model type kept in the knowledge table beside the ones the planner reads: the
# reference checkpoint the entry was checked against, and two reference-workflow properties.
reference_checkpoint
needs_hf_model_path
fp8_kv_cache

# Attributes set for libraries to read: the kubernetes client's Configuration, tarfile's TarInfo,
# ctypes/DLPack structures, the argparse namespace a vendored recipe reads, kopf's settings, an argparse
# parser's help formatter.
_.ssl_ca_cert
_.api_key
_.api_key_prefix
_.mtime
_.linkname
_.device
_.strides
_.deleter
_.standalone
_.disabled
_.server_timeout
_.client_timeout
_.request_timeout
_.initial_streaming
_.formatter_class

# http.server's hooks and class settings, which the standard library reads (the trtllm-serve double, the
# stand-in API server of tests/unit/kube/test_client_transport.py).
do_GET
do_POST
do_PATCH
daemon_threads
allow_reuse_address
server_version
sys_version
_.close_connection

# pydantic validators: pydantic calls them while it validates a model.
_null_is_absent

# PyYAML's hooks, which its dumper calls (mmd_operator.desired.decision's dumper without aliases).
ignore_aliases

# http.server's BaseHTTPRequestHandler calls these by name (the Hub double of mmd_testbed.build_tools).
protocol_version
do_HEAD
do_PUT

# pytest-xdist's LoadScopeScheduling calls it to split test ids into groups (conftest.py).
_split_scope

# Status fields written for users to read (kubectl get -o yaml), read by no Python.
max_audio_seconds
