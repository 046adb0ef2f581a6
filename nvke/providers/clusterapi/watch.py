"""Cluster API's status as it changes: list-watches of the Clusters, MachineDeployments and add-ons'
HelmChartProxies NVKE made in the management cluster (label nvke.io/cluster), with the Kubernetes
provider's ListWatch (bookmarks, resourceVersion, re-list on 410 Gone, resync, backoff). After every
listed object and every event it calls `changed(cluster_key, pool)` (pool "" for a Cluster and its
add-ons); the caller runs the level-triggered step that reads the state afresh (provisioning, the
add-ons' state, the pool's reconcile), so a missed or repeated event changes nothing."""

import functools
import threading
from collections.abc import Callable

from nvke.providers.base import ProviderError
from nvke.providers.kubernetes.watch import ListWatch

from . import manifests
from .management import CORE_PLURALS, Management


def watched(management: Management) -> list[tuple[str, str]]:
    """(apiVersion, resource) of what is followed: Clusters and MachineDeployments, and the add-ons'
    HelmChartProxies where Cluster API's add-on provider for Helm is served (their status changes as
    their releases get ready)."""
    kinds = [(manifests.CORE, CORE_PLURALS["Cluster"]), (manifests.CORE, CORE_PLURALS["MachineDeployment"])]
    try:
        kinds.append((manifests.ADDONS, management.plural(manifests.ADDONS, "HelmChartProxy")))
    except ProviderError as error:
        if error.status != 404:
            raise
    return kinds


class ManagementWatch:
    def __init__(
        self,
        management: Management,
        *,
        changed: Callable[[str, str], None],
        failed: Callable[[ProviderError], None],
        resync_s: float = 300.0,
        watch_timeout_s: int = 60,
    ):
        self.changed, self.stop = changed, threading.Event()
        self.watches = [
            ListWatch(
                functools.partial(
                    management.custom.list_namespaced_custom_object,
                    *api_version.split("/"),
                    management.namespace,
                    plural,
                ),
                on_list=self._listed,
                on_event=lambda _, obj: self._seen(obj),
                on_error=failed,
                stop=self.stop,
                resync_s=resync_s,
                watch_timeout_s=watch_timeout_s,
                label_selector=manifests.NVKE_CLUSTER,
            )
            for api_version, plural in watched(management)
        ]
        self.threads = [threading.Thread(target=w.run, daemon=True, name="capi-watch") for w in self.watches]

    def _listed(self, items: list[dict]) -> None:
        for obj in items:
            self._seen(obj)

    def _seen(self, obj: dict) -> None:
        labels = obj["metadata"].get("labels") or {}
        self.changed(labels[manifests.NVKE_CLUSTER], labels.get(manifests.POOL, ""))

    def start(self) -> "ManagementWatch":
        for thread in self.threads:
            thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout)
