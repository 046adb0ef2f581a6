"""Watches through kubernetes.watch.Watch: resourceVersions, bookmarks, 410 Expired, selectors, timeouts."""

import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import objects
from tests.kubeapi.fixtures import wait_until


@pytest.fixture(autouse=True)
def no_scheduler(kubeapi):
    """Watch semantics only: kube-scheduler's status writes on unschedulable pods would be events too."""
    kubeapi.actors.kube_scheduler = False


def take(stream, count: int) -> list[tuple[str, str]]:
    """The first `count` events as (type, name), the stream then closed."""
    events = []
    for event in stream:
        events.append((event["type"], event["raw_object"]["metadata"].get("name")))
        if len(events) == count:
            break
    stream.close()
    return events


def test_a_watch_from_a_resource_version_gets_only_later_events(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    kubeapi.create(objects.pod("before"))
    version = core.list_namespaced_pod("default").metadata.resource_version
    kubeapi.create(objects.pod("after"))
    kubeapi.patch_merge("v1", "Pod", "before", {"metadata": {"labels": {"a": "b"}}})
    kubeapi.delete("v1", "Pod", "after")
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=version, timeout_seconds=5
    )
    assert take(stream, 3) == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]


def test_a_watch_without_a_resource_version_starts_with_the_current_objects(kubeapi, kube_client):
    kubeapi.create(objects.pod("a"))
    kubeapi.create(objects.pod("b"))
    core = client.CoreV1Api(kube_client)
    stream = watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=5)
    seen = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            kubeapi.create(objects.pod("c"))  # a write wakes the watch at once
        if len(seen) == 3:
            break
    stream.close()
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_events_carry_typed_objects_and_their_resource_versions(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    version = core.list_namespaced_pod("default").metadata.resource_version
    created = kubeapi.create(objects.pod("a"))
    event = next(
        iter(
            watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=version, timeout_seconds=5
            )
        )
    )
    assert isinstance(event["object"], client.V1Pod)
    assert event["object"].metadata.resource_version == created["metadata"]["resourceVersion"]


def test_bookmarks_arrive_while_idle(kubeapi, kube_client):
    kubeapi.bookmark_interval = 0.1
    core = client.CoreV1Api(kube_client)
    version = core.list_namespaced_pod("default").metadata.resource_version
    kubeapi.create(objects.gpu_node("gpu-1"))  # another kind: moves the resourceVersion, not this watch
    w = watch.Watch()
    started = time.monotonic()
    stream = w.stream(
        core.list_namespaced_pod,
        "default",
        resource_version=version,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    )
    event = next(iter(stream))
    stream.close()
    assert event["type"] == "BOOKMARK" and time.monotonic() - started < 4
    assert event["raw_object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(kubeapi.store.rv)},
    }
    assert w.resource_version == str(kubeapi.store.rv)


def test_no_bookmarks_unless_asked(kubeapi, kube_client):
    kubeapi.bookmark_interval = 0.05
    stream = watch.Watch().stream(client.CoreV1Api(kube_client).list_node, timeout_seconds=1)
    assert list(stream) == []


def test_a_watch_from_a_compacted_resource_version_is_410_expired(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    old = core.list_namespaced_pod("default").metadata.resource_version
    kubeapi.create(objects.pod("a"))
    kubeapi.compact()
    kubeapi.clear_requests()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=old):
            pass
    assert caught.value.status == 410 and "too old resource version" in caught.value.reason
    watches = [query for _, _, query, _ in kubeapi.requests if "watch" in query]
    assert watches[0]["watch"] == "true"
    assert len(watches) == 2  # the client retries a 410 once from the same version, then gives up
    current = core.list_namespaced_pod("default").metadata.resource_version
    assert (
        list(
            watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=current, timeout_seconds=1
            )
        )
        == []
    )


def test_the_410_is_an_error_event_on_a_200_stream(kubeapi, kube_client):
    kubeapi.create(objects.pod("a"))
    kubeapi.compact()
    response = client.CoreV1Api(kube_client).list_namespaced_pod(
        "default", watch=True, resource_version="1", _preload_content=False
    )
    assert response.status == 200
    assert response.data == (
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"too old resource version: 1 ('
        + str(kubeapi.store.rv).encode()
        + b')","reason":"Expired","code":410}}\n'
    )


def test_selectors_filter_watch_events(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    version = core.list_namespaced_pod("default").metadata.resource_version
    kubeapi.create(objects.pod("web", labels={"app": "web"}))
    kubeapi.create(objects.pod("db", labels={"app": "db"}))
    kubeapi.patch_merge("v1", "Pod", "db", {"metadata": {"labels": {"app": "web"}}})  # joins the selection
    kubeapi.patch_merge("v1", "Pod", "web", {"metadata": {"labels": {"app": "api"}}})  # leaves it
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        label_selector="app=web",
        resource_version=version,
        timeout_seconds=5,
    )
    assert take(stream, 3) == [("ADDED", "web"), ("ADDED", "db"), ("DELETED", "web")]
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.gpu_node("gpu-2"))
    kubeapi.patch_merge("v1", "Node", "gpu-2", {"spec": {"unschedulable": True}})
    stream = watch.Watch().stream(
        core.list_node, field_selector="metadata.name=gpu-2", resource_version=version, timeout_seconds=5
    )
    assert take(stream, 2) == [("ADDED", "gpu-2"), ("MODIFIED", "gpu-2")]


def test_a_namespaced_watch_sees_only_its_namespace(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    version = core.list_pod_for_all_namespaces().metadata.resource_version
    kubeapi.create(objects.pod("system", namespace="kube-system"))
    kubeapi.create(objects.pod("mine"))
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=version, timeout_seconds=5
    )
    assert take(stream, 1) == [("ADDED", "mine")]
    stream = watch.Watch().stream(
        core.list_pod_for_all_namespaces, resource_version=version, timeout_seconds=5
    )
    assert take(stream, 2) == [("ADDED", "system"), ("ADDED", "mine")]


def test_timeout_seconds_ends_the_stream_cleanly(kube_client):
    started = time.monotonic()
    assert list(watch.Watch().stream(client.CoreV1Api(kube_client).list_node, timeout_seconds=1)) == []
    assert 0.9 < time.monotonic() - started < 5


def test_stopping_the_server_ends_open_streams(kubeapi, kube_client):
    ended = threading.Event()

    def consume() -> None:
        for _ in watch.Watch().stream(client.CoreV1Api(kube_client).list_node, timeout_seconds=30):
            pass
        ended.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    wait_until(lambda: any(query.get("watch") for _, _, query, _ in kubeapi.requests))
    kubeapi.stop()
    assert ended.wait(5)


def test_watching_custom_resources(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)
    custom = client.CustomObjectsApi(kube_client)
    version = custom.list_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers")["metadata"][
        "resourceVersion"
    ]
    kubeapi.actors.gpu_operator = False
    kubeapi.create(objects.nvidia_driver("d570", version="570.133.20"))
    stream = watch.Watch().stream(
        custom.list_cluster_custom_object,
        "nvidia.com",
        "v1alpha1",
        "nvidiadrivers",
        resource_version=version,
        timeout_seconds=5,
    )
    assert take(stream, 1) == [("ADDED", "d570")]
