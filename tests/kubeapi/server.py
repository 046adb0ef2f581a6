"""FakeKubeApi: the store behind an HTTPS server on 127.0.0.1 that speaks kube-apiserver's REST dialect well
enough for the unchanged official client: discovery, CRUD, patches, watches, subresources, auth and faults."""

from __future__ import annotations

import base64
import copy
import io
import json
import re
import select
import socket
import ssl
import threading
import time
import traceback
from dataclasses import dataclass
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

from . import admission, authorization, http2, resources, subresources
from .actors import Actors
from .errors import ApiError, bad_request, conflict, not_found
from .features import FeatureGates
from .objects import namespace
from .resources import Registry, ResourceType
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import PATCH_TYPES, Store
from .tls import ADMIN, OTHER_CA_BUNDLE, server_material

__all__ = ["OTHER_CA_BUNDLE", "FakeKubeApi"]


def _found(document: dict[str, Any] | None) -> dict[str, Any]:
    if document is None:
        raise ApiError(404, "the server could not find the requested resource", details={})
    return document


DEFAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    503: "the server is currently unable to handle the request",
}


@dataclass
class Fault:
    action: str  # fail, drop or conflict
    method: str
    pattern: re.Pattern
    remaining: int
    status: int = 0
    reason: str = ""
    message: str = ""


class Faults:
    """Answers to inject for the next matching requests (matched on method and path, not the query)."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def fail(
        self, method: str, path_regex: str, status: int, times: int = 1, reason: str = "", message: str = ""
    ) -> None:
        """Answer with a Status of this code (429 with Retry-After: 0, as API priority and fairness does)."""
        self._add(Fault("fail", method, re.compile(path_regex), times, status, reason, message))

    def drop(self, method: str, path_regex: str, times: int = 1) -> None:
        """Close the connection without answering."""
        self._add(Fault("drop", method, re.compile(path_regex), times))

    def conflict(self, path_regex: str, times: int = 1) -> None:
        """Answer PUTs and PATCHes with 409 Conflict, as if their resourceVersion were stale."""
        self._add(Fault("conflict", "PUT|PATCH", re.compile(path_regex), times))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def take(self, method: str, path: str, actions: tuple[str, ...]) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if (
                    fault.action in actions
                    and fault.remaining > 0
                    and re.fullmatch(fault.method, method, re.IGNORECASE)
                    and fault.pattern.search(path)
                ):
                    fault.remaining -= 1
                    return fault
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections are shut down by stop() instead

    def __init__(self, api: FakeKubeApi, tls: ssl.SSLContext) -> None:
        self.api, self.tls = api, tls
        self.connections: set[ssl.SSLSocket] = set()
        self.multiplexed: set[http2.Connection] = set()  # the HTTP/2 ones, by their protocol state
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request, client_address) -> None:
        pass  # failed handshakes and clients that hang up are part of the tests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the client's
    # delayed ACK hold every keep-alive response back by 40 ms (StreamRequestHandler sets it in setup()).
    disable_nagle_algorithm = True
    server: _Server
    user: authorization.User  # who sent the request being handled

    def setup(self) -> None:
        # The TLS handshake happens here, in the connection's thread, so a stalled client cannot block accept.
        self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        with self.server.connections_lock:
            self.server.connections.add(self.request)
        super().setup()

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.request)
        try:
            super().finish()
        finally:
            self.request.close()

    def handle(self) -> None:
        if self.request.selected_alpn_protocol() == "h2":
            multiplexed = http2.Connection(self.request, self._serve_stream)
            with self.server.connections_lock:
                self.server.multiplexed.add(multiplexed)
            try:
                multiplexed.serve()
            finally:
                with self.server.connections_lock:
                    self.server.multiplexed.discard(multiplexed)
        else:
            super().handle()

    def _serve_stream(self, connection: http2.Connection, stream: http2.Stream) -> None:
        _StreamHandler(self.server, self.request, connection, stream).serve()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    # ---- plumbing ----------------------------------------------------------------------------------------

    def _send(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _handle(self) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        api.requests.append((self.command, path, query, body))
        try:
            user = api.user(self.headers.get("Authorization") or "", self._admin_certificate())
            if user is None:
                raise ApiError(401, "Unauthorized")
            # request.userInfo for admission policies; `token_user` lets the server's own token stand for one
            admission.serve_as(api.token_user if user is authorization.ADMIN else user.name)
            fault = api.faults.take(self.command, path, ("fail", "drop"))
            if fault and fault.action == "drop":
                self.close_connection = True
                return
            if fault:
                message = fault.message or DEFAULT_MESSAGES.get(
                    fault.status, "injected by FakeKubeApi.faults"
                )
                headers = {"Retry-After": "0"} if fault.status == 429 else {}
                raise ApiError(fault.status, message, fault.reason or None, headers=headers)
            # Authentication, then priority and fairness (the faults above), then authorization: the order
            # of kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/server/config.go's handler chain.
            self.user = user
            api.authorize(user, authorization.request_attributes(self.command, path, query))
            if isinstance(body, str):
                raise bad_request(f"the request body is not JSON: {body[:80]}")
            self._route(path, query, body)
        except ApiError as error:
            self._send(error.code, error.status(), error.headers)
        except SelectorError as error:
            self._send(400, bad_request(str(error)).status())
        except Exception as error:  # a bug here: answer what kube-apiserver answers for its own
            message = f"Internal error occurred: {''.join(traceback.format_exception(error))}"
            self._send(500, ApiError(500, message).status())

    def _admin_certificate(self) -> bool:
        """A client certificate the server's CA signed for `tls.ADMIN` (verified in the handshake)."""
        subject = dict(pair[0] for pair in (self.request.getpeercert() or {}).get("subject", ()))
        return subject.get("commonName") == ADMIN

    # ---- routing -----------------------------------------------------------------------------------------

    def _route(self, path: str, query: dict[str, str], body: Any) -> None:
        api = self.server.api
        registry = api.store.registry
        parts = [p for p in path.split("/") if p]
        with api.store.lock:  # the registry changes when CRDs are written
            if parts == ["version"]:
                return self._send(200, api.version_info())
            if parts == ["api"]:
                address = [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{api.port}"}]
                return self._send(
                    200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": address}
                )
            if parts == ["apis"]:
                return self._send(200, resources.api_group_list(registry))
            if len(parts) == 2 and parts[0] == "apis":
                return self._send(200, _found(resources.api_group(registry, parts[1])))
            if len(parts) >= 2 and parts[0] == "api":
                group, version, rest = "", parts[1], parts[2:]
            elif len(parts) >= 3 and parts[0] == "apis":
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                _found(None)
            if not rest:
                return self._send(200, _found(resources.api_resource_list(registry, group, version)))
            ns = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                inner = registry.by_path(group, version, rest[2])
                if inner is not None and inner.namespaced:
                    ns, rest = rest[1], rest[2:]
            rt = registry.by_path(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if (
            rt is None
            or len(rest) > 3
            or (sub and sub not in rt.subresources)
            or (name and rt.namespaced and ns is None)
            or (ns is not None and not rt.namespaced)
        ):
            _found(None)
        if sub in ("eviction", "binding"):
            verb = "create" if self.command == "POST" else ""
        elif self.command == "GET":
            verb = "get" if name else "watch" if query.get("watch") in ("true", "1") else "list"
        elif self.command == "POST":
            verb = "" if name else "create"
        else:
            verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}[self.command] if name else ""
        if verb not in rt.verbs:
            raise ApiError(405, "the server does not allow this method on the requested resource", details={})
        getattr(self, f"_{verb}")(rt, ns, name, sub, query, body)

    # ---- verbs -------------------------------------------------------------------------------------------

    def _selectors(self, rt: ResourceType, query: dict[str, str]) -> tuple[list, list]:
        return parse_label_selector(query.get("labelSelector")), parse_field_selector(
            query.get("fieldSelector"), rt.kind, rt.namespaced
        )

    def _get(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        store = self.server.api.store
        obj = store.stored(rt, ns, name)
        if obj is None:
            raise not_found(rt, name)
        self._send(200, {**obj, "apiVersion": rt.api_version})  # serialized, not copied: never changed

    def _list(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        store = self.server.api.store
        labels, fields = self._selectors(rt, query)
        with store.lock:  # the stored objects, serialized rather than copied (stored objects never change)
            items, version = store.snapshot(rt, ns, labels, fields), store.rv
        token = query.get("continue")
        if token:
            try:
                start = json.loads(base64.b64decode(token))
            except ValueError as error:
                raise bad_request(f"invalid continue token: {error}") from error
            if start["rv"] < store.compacted_rv:
                message = "The provided continue parameter is too old to display a consistent list result."
                raise ApiError(410, message)
            items = [
                i for i in items if [i["metadata"].get("namespace", ""), i["metadata"]["name"]] > start["key"]
            ]
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            key = [last.get("namespace", ""), last["name"]]
            meta["continue"] = base64.b64encode(json.dumps({"rv": version, "key": key}).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if rt.custom:
            items = [{**i, "apiVersion": rt.api_version} for i in items]
        else:  # items of built-in lists carry no apiVersion and kind
            items = [{k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in items]
        self._send(
            200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}
        )

    def _watch(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        api = self.server.api
        labels, fields = self._selectors(rt, query)
        version = query.get("resourceVersion")
        if version and not version.isdigit():
            raise bad_request(f'invalid resource version "{version}"')
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = time.monotonic() + timeout if timeout else None
        watcher = api.store.watch(rt, ns, labels, fields, version)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        last_sent = time.monotonic()
        try:
            while not self._client_gone():
                now = time.monotonic()
                wait = 0.2  # how often a hung-up client is noticed
                if deadline is not None:
                    if now >= deadline:
                        break
                    wait = min(wait, deadline - now)
                if bookmarks:
                    wait = min(wait, max(0.0, last_sent + api.bookmark_interval - now))
                due = bookmarks and now - last_sent >= api.bookmark_interval
                events = watcher.next(wait, bookmark=due)
                if events is None:
                    break  # the server is stopping
                for event in events:
                    self._chunk(json.dumps(event, separators=(",", ":")) + "\n")
                    last_sent = time.monotonic()
                if watcher.expired:
                    break
            self._chunk("")
        except OSError:
            pass  # the client went away

    def _client_gone(self) -> bool:
        # A watching client sends nothing more: readable means it closed the connection.
        return bool(select.select([self.connection], [], [], 0)[0])

    def _body(self, rt: ResourceType, ns: str | None, body: Any, name: str | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        body = copy.deepcopy(body)
        if body.setdefault("apiVersion", rt.api_version) != rt.api_version:
            raise bad_request(
                f"the API version in the data ({body['apiVersion']}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if body.setdefault("kind", rt.kind) != rt.kind:
            raise bad_request(
                f"the kind in the data ({body['kind']}) does not match the expected kind ({rt.kind})"
            )
        meta = body.setdefault("metadata", {})
        if rt.namespaced:
            if meta.setdefault("namespace", ns) != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
        if name is not None and meta.get("name") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        return body

    def _create(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        api, dry_run = self.server.api, query.get("dryRun") == "All"
        if sub == "eviction":
            result = subresources.evict(
                api.store, ns, name, body or {}, api.actors.pod_grace_seconds, dry_run
            )
        elif sub == "binding":
            result = subresources.bind(api.store, ns, name, body or {}, dry_run)
        elif rt.kind == "SelfSubjectAccessReview":
            result = subresources.access_review(
                api.authorizer, self.user, self._body(rt, ns, body), api.store.registry.minor
            )
        else:
            result = api.store.create(rt, self._body(rt, ns, body), dry_run=dry_run)
        self._send(201, result)

    def _conflict_fault(self, rt: ResourceType, name: str) -> None:
        if self.server.api.faults.take(self.command, urlsplit(self.path).path, ("conflict",)):
            raise conflict(rt, name)

    def _update(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        store = self.server.api.store
        self._conflict_fault(rt, name)
        obj = self._body(rt, ns, body, name)
        dry_run = query.get("dryRun") == "All"
        write = lambda dry: store.update(rt, obj, subresource=sub, dry_run=dry)  # noqa: E731
        self._send(200, self._status_authorized(rt, ns, name, sub, "update", write, dry_run))

    def _patch(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        store = self.server.api.store
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        accepted = [t for t in PATCH_TYPES if not (rt.custom and "strategic" in t)]
        if content_type not in accepted:
            types = ", ".join(accepted)
            message = (
                f"the body of the request was in an unknown format - accepted media types include: {types}"
            )
            raise ApiError(415, message)
        self._conflict_fault(rt, name)
        dry_run = query.get("dryRun") == "All"
        write = lambda dry: store.patch(rt, ns, name, content_type, body, subresource=sub, dry_run=dry)  # noqa: E731
        self._send(200, self._status_authorized(rt, ns, name, sub, "patch", write, dry_run))

    def _status_authorized(self, rt: ResourceType, ns, name, sub, verb, write, dry_run: bool) -> dict:
        """Write, after the checks a status write needs beyond its endpoint's (1.36's DRA fields): the object
        the write would store is computed first (a dry run), under the lock the write then holds."""
        store = self.server.api.store
        with store.lock:
            if sub == "status" and not self.user.privileged:
                self.server.api.authorize_status(self.user, rt, store.get(rt, ns, name), write(True), verb)
            return write(dry_run)

    def _delete(self, rt: ResourceType, ns, name, sub, query, body) -> None:
        api = self.server.api
        options = body if isinstance(body, dict) else {}
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        grace = api.actors.pod_grace_seconds if grace is None else int(grace)
        dry_run = "All" in (options.get("dryRun") or []) or query.get("dryRun") == "All"
        obj, gone = api.store.delete(
            rt, ns, name, grace=grace, preconditions=options.get("preconditions"), dry_run=dry_run
        )
        if gone and not rt.returns_deleted:
            details = {
                "name": name,
                **({"group": rt.group} if rt.group else {}),
                "kind": rt.plural,
                "uid": obj["metadata"]["uid"],
            }
            obj = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        self._send(200, obj)


class _StreamWriter(io.RawIOBase):
    def __init__(self, connection: http2.Connection, stream: http2.Stream):
        self.connection, self.stream = connection, stream

    def write(self, data: bytes) -> int:
        self.connection.send(self.stream, bytes(data))
        return len(data)


class _StreamHandler(_Handler):
    """One HTTP/2 stream's request, served by _Handler's code: the status and headers it sends become a
    HEADERS frame (without HTTP/1.1's connection-specific fields, which HTTP/2 forbids: RFC 9113 8.2.2),
    what it writes DATA frames, and the end of the handler the stream's end."""

    HOP_BY_HOP = {"connection", "transfer-encoding", "keep-alive"}

    def __init__(
        self, server: _Server, sock: ssl.SSLSocket, connection: http2.Connection, stream: http2.Stream
    ):
        # Not BaseHTTPRequestHandler's __init__: the request was read by the connection's thread.
        self.server, self.request, self.h2 = server, sock, connection
        self.stream = stream
        self.command = stream.headers[":method"]
        self.path = stream.headers[":path"]
        self.headers = HTTPMessage()
        for key, value in stream.headers.items():
            if not key.startswith(":"):
                self.headers[key] = value
        del self.headers["Content-Length"]
        self.headers["Content-Length"] = str(len(stream.body))
        self.rfile = io.BytesIO(bytes(stream.body))
        self.wfile = _StreamWriter(connection, stream)
        self.close_connection = False
        self._status, self._fields = 200, []

    def serve(self) -> None:
        try:
            self._handle()
            if self.close_connection and not self._fields:  # a `drop` fault: no answer at all
                self.h2.drop()
        except OSError:
            pass  # the client went away
        finally:
            self.h2.end(self.stream)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status, self._fields = code, [("date", self.date_time_string())]

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() not in self.HOP_BY_HOP:
            self._fields.append((keyword.lower(), value))

    def end_headers(self) -> None:
        self.h2.respond(self.stream, self._status, self._fields)

    def _chunk(self, text: str) -> None:
        if text:  # HTTP/2 frames the body itself: the last chunk of HTTP/1.1 is the stream's end here
            self.h2.send(self.stream, text.encode())

    def _client_gone(self) -> bool:
        return self.h2.gone(self.stream)


class FakeKubeApi:
    """A fake kube-apiserver on https://127.0.0.1:<port>, with simulated cluster components (see actors.py).

    Seeding and inspection (create, get, list, update, patch_merge, delete) skip auth and faults but otherwise
    write exactly as API requests do: resourceVersions, watch events, validation and the simulated components.
    """

    # `decisions` of every server of this process, for a run that records what a whole suite was allowed
    every_decision: ClassVar[set[tuple[str, str, str, str, bool]]] = set()

    def __init__(self, version: str = "1.34.2", token: str = "test-token") -> None:
        self.version = version.lstrip("v")
        self.token = token
        self.token_user = "kubernetes-admin"  # who the server's own token authenticates
        self.store = Store(Registry(int(self.version.split(".")[1])))
        self.features = FeatureGates(self.store.registry.minor)
        self.store.strategy = self.features.drop_disabled_fields
        self.store.registry.enabled = self.features.enabled
        self.actors = Actors(self.store, self.features)
        self.store.on_write = self.actors.reconcile
        self.faults = Faults()
        self.authorizer = authorization.Authorizer(self.store)
        # (user, group, resource[/subresource], verb, allowed) of each decision on a service account's request
        self.decisions: set[tuple[str, str, str, str, bool]] = set()
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.bookmark_interval = 1.0  # seconds of silence after which a watch with bookmarks gets one
        self.ca_bundle, self._cert_file, self._key_file = server_material()
        self.store.ca_bundle = self.ca_bundle
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        for name in ("default", "kube-system"):
            self.create(namespace(name))

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(self._cert_file, self._key_file)
        # A client may authenticate with a certificate of the server's CA instead of a bearer token.
        tls.verify_mode = ssl.CERT_OPTIONAL
        tls.load_verify_locations(cadata=self.ca_bundle)
        tls.set_alpn_protocols(["h2", "http/1.1"])  # as kube-apiserver: HTTP/2 for a client that offers it
        self._server = _Server(self, tls)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def open_connections(self) -> dict[str, int]:
        """The client connections open now, by the protocol each negotiated ("h2" or "http/1.1")."""
        with self._server.connections_lock:
            protocols = [c.selected_alpn_protocol() or "http/1.1" for c in self._server.connections]
        return {protocol: protocols.count(protocol) for protocol in set(protocols)}

    def goaway(self) -> None:
        """Every HTTP/2 connection gets a GOAWAY and is closed (http2.Connection.goaway)."""
        with self._server.connections_lock:
            multiplexed = list(self._server.multiplexed)
        for connection in multiplexed:
            connection.goaway()

    def stop(self) -> None:
        if self._server is None:
            return
        self.store.close()  # ends every watch stream
        self._server.shutdown()
        with self._server.connections_lock:
            connections = list(self._server.connections)
        for connection in connections:
            try:
                socket.socket.shutdown(connection, socket.SHUT_RDWR)  # wakes the thread reading it
            except OSError:
                pass
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def user(self, header: str, admin_certificate: bool = False) -> authorization.User | None:
        """Who a request is: the server's own token and the admin certificate are system:masters; a token
        the token controller issued is its service account; anything else is nobody (401)."""
        scheme, _, token = header.partition(" ")
        if admin_certificate or (scheme == "Bearer" and token == self.token):
            return authorization.ADMIN
        if scheme == "Bearer" and token in self.store.tokens:
            return authorization.token_user(self.store, token)
        return None

    def authorize(self, user: authorization.User, attributes: authorization.Attributes) -> None:
        """403 unless RBAC allows it; every decision on a service account's resource request is recorded."""
        allowed, _ = self.authorizer.decide(user, attributes)
        if not user.privileged and attributes.resource_request:
            decision = (user.name, attributes.group, attributes.combined_resource, attributes.verb, allowed)
            self.decisions.add(decision)
            FakeKubeApi.every_decision.add(decision)
        if not allowed:
            raise authorization.forbidden(user, attributes)

    def authorize_status(
        self, user: authorization.User, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], verb: str
    ) -> None:
        if rt.key != ("resource.k8s.io", "resourceclaims"):
            return
        for field, attributes in authorization.claim_status_checks(old, new, verb, self.store.registry.minor):
            try:
                self.authorize(user, attributes)
            except ApiError:
                raise authorization.status_forbidden(old["metadata"]["name"], field, attributes) from None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeKubeApi is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def version_info(self) -> dict[str, str]:
        major, minor = self.version.split(".")[:2]
        return {
            "major": major,
            "minor": minor,
            "emulationMajor": major,
            "emulationMinor": minor,
            "minCompatibilityMajor": major,
            "minCompatibilityMinor": str(int(minor) - 1),
            "gitVersion": f"v{self.version}",
            "gitCommit": "4d8b0ba8b4c5a9b3c5a6a8f1d2e3c4b5a6d7e8f9",
            "gitTreeState": "clean",
            "buildDate": "2025-11-11T18:00:00Z",
            "goVersion": "go1.24.9",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    # ---- seeding and inspection --------------------------------------------------------------------------

    def _type(self, api_version: str, kind: str) -> ResourceType:
        with self.store.lock:
            rt = self.store.registry.by_kind(api_version, kind)
        if rt is None:
            raise KeyError(f"no resource serves {api_version} {kind}")
        return rt

    @staticmethod
    def _namespace(rt: ResourceType, namespace: str | None) -> str | None:
        return (namespace or "default") if rt.namespaced else None

    def _placed(self, obj: dict[str, Any]) -> tuple[ResourceType, dict[str, Any]]:
        rt = self._type(obj["apiVersion"], obj["kind"])
        obj = copy.deepcopy(obj)
        if rt.namespaced:
            obj.setdefault("metadata", {}).setdefault("namespace", "default")
        return rt, obj

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        rt, obj = self._placed(obj)
        return self.store.create(rt, obj, api=False)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        rt = self._type(api_version, kind)
        return self.store.find(rt, self._namespace(rt, namespace), name)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        rt = self._type(api_version, kind)
        fields = parse_field_selector(field_selector, kind, rt.namespaced)
        return self.store.list(
            rt, namespace if rt.namespaced else None, parse_label_selector(label_selector), fields
        )

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        rt, obj = self._placed(obj)
        return self.store.update(rt, obj, api=False)

    def patch_merge(
        self, api_version: str, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        rt = self._type(api_version, kind)
        return self.store.patch(rt, self._namespace(rt, namespace), name, PATCH_TYPES[0], patch, api=False)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        rt = self._type(api_version, kind)
        self.store.delete(rt, self._namespace(rt, namespace), name, grace=self.actors.pod_grace_seconds)

    def settle(self, seconds: float = 0.0) -> None:
        """Let `seconds` pass on the cluster's clock (grace periods end), then run the components until quiet.

        The components also run after every write; this is for time passing and for knobs changed since."""
        with self.store.lock:
            self.store.clock_offset += seconds
            self.store.react()

    def compact(self) -> None:
        """Forget watch history up to now: watching from an older resourceVersion then gets 410 Expired."""
        self.store.compact()

    # ---- requests ----------------------------------------------------------------------------------------

    def clear_requests(self) -> None:
        self.requests.clear()
