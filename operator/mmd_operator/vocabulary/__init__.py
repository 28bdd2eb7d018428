"""The words the operator's layers share: kinds, label keys, object names, digests, owner references.

Both the pure layers (`desired`, `status`) and the kube adapter speak them, so they live below both.
Pure; imports the api models, the config and the facts at most.
"""
