"""The devices DRA drivers publish (ResourceSlices) and their DeviceClasses, listed at most once a minute.

Read only for resources that ask for their GPUs by claim (`spec.gpus.resourceClaim`), to learn which kinds
of GPU their claims can be given (`judgement.gpu_kinds.kinds_of_devices`). Shared by every reconcile,
safe to call from worker threads. A cluster without `resource.k8s.io/v1`, or an operator not allowed to
list them, reads as nothing known, and is asked again only as rarely as the node directory asks after a
refusal. Imports the kube client, the node directory's back-off, the object facts and the vocabulary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mmd_operator.facts import Devices
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.nodes import FORBIDDEN_RETRY
from mmd_operator.vocabulary import kinds

_log = logging.getLogger(__name__)
# How old a listing may be; a GPU node that joins is seen within this, or at once when a claim admits
# none of the listed devices (at most every `RETRY_AFTER` s).
MAX_AGE = 60.0
RETRY_AFTER = 5.0


class DeviceDirectory:
    """The last listing of the devices and their classes."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._lock = threading.Lock()
        self._devices: Devices | None = None
        self._tried_at = float("-inf")
        self._refused = False

    def devices(self, *, renew: bool = False) -> Devices | None:
        """The devices and classes; None when they cannot be read.

        At most `MAX_AGE` s old, or `RETRY_AFTER` s when the caller asks to `renew`. An operator that may not
        list them, or a cluster without the API, is asked again only every `FORBIDDEN_RETRY` s, and said so
        once; any other error keeps the last listing.
        """
        with self._lock:
            now = self.clock()
            wait = FORBIDDEN_RETRY if self._refused else RETRY_AFTER if renew else MAX_AGE
            if now - self._tried_at < wait:
                return self._devices
            self._tried_at = now
            try:
                slices = self.client.list(kinds.RESOURCE_SLICE.api_version, kinds.RESOURCE_SLICE.kind)
                classes = self.client.list(kinds.DEVICE_CLASS.api_version, kinds.DEVICE_CLASS.kind)
            except ApiError as error:
                if error.status not in (401, 403, 404):
                    _log.debug("Could not list the devices (keeping the last listing): %s", error)
                    return self._devices
                if not self._refused:
                    _log.info(
                        "The operator may not list ResourceSlices and DeviceClasses, or the cluster has no "
                        "resource.k8s.io/v1 (%s): the kinds of GPU a claim admits are unknown "
                        "(the chart's rbac.readNodes grants the listing)",
                        error.status,
                    )
                self._refused, self._devices = True, None
                return None
            if self._refused:
                _log.info("The operator may list ResourceSlices and DeviceClasses again")
            self._refused = False
            self._devices = Devices(
                devices=tuple(device for item in slices for device in object_facts.slice_devices(item)),
                classes=tuple(object_facts.device_class(item) for item in classes),
            )
            return self._devices
