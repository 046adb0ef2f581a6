// Runs frontend/static/frontend/socket.js and live.js against a tiny fake DOM, WebSocket, timers and htmx,
// and checks what they do with each kind of event: badges changed in place, the refresh event htmx
// listens for fired (htmx's own re-fetch and swap is the browser tests'), and the socket's backoff.
// Run by test_live_js.py (node, no packages); exits non-zero on failure.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const STATIC = path.join(__dirname, "../../frontend/static/frontend");
const sources = ["socket.js", "live.js"].map((name) => fs.readFileSync(path.join(STATIC, name), "utf8"));

function makeElement(attrs, text) {
  return {
    attrs,
    id: attrs.id || "",
    textContent: text || "",
    className: "",
    hidden: false,
    getAttribute: (name) => attrs[name],
  };
}

const elements = [
  makeElement({ "data-pool-status": "7" }, "provisioning"),
  makeElement({ "data-pool-nodes": "7" }, "0/2"),
  makeElement({ "data-pool-reason": "7" }, ""),
  makeElement({ "data-pool-row": "8" }),
  makeElement({ "data-cluster-status": "5" }, "provisioning"),
  makeElement({ "data-cluster-status": "6" }, "provisioning"),
  makeElement({ "data-live-region": "", id: "pool-nodes" }),
  makeElement({ "data-claim-status": "30" }, "pending"),
  makeElement({ "data-claim-reason": "30" }, "0/1 nodes: 1 insufficient GPU memory"),
  makeElement({ "data-claim-row": "31" }),
];
const parent = {
  removeChild(child) {
    elements.splice(elements.indexOf(child), 1);
  },
};
elements.forEach((el) => (el.parentNode = parent));

function querySelectorAll(selector) {
  if (selector === "[data-live-region][id]") return elements.filter((el) => "data-live-region" in el.attrs && el.id);
  const present = /^\[([\w-]+)\]$/.exec(selector);
  if (present) return elements.filter((el) => present[1] in el.attrs);
  const match = /^\[([\w-]+)="([^"]*)"\]$/.exec(selector);
  assert.ok(match, `unexpected selector ${selector}`);
  return elements.filter((el) => el.attrs[match[1]] === match[2]);
}

const sockets = [];
class FakeWebSocket {
  constructor(url) {
    this.url = url;
    sockets.push(this);
  }
}
const timers = [];
const assigned = [];
// base.html's htmx element that re-fetches the regions, and the refresh events fired at <body>.
const refresher = { attrs: {}, setAttribute(name, value) { this.attrs[name] = value; } };
const processed = [];
const refreshes = [];
const bodyListeners = {};
const body = {
  dataset: { wsUrl: "/ws/events/?cluster=5", refreshOn: "pool:7", goneOn: "pool:7", goneUrl: "/clusters/5/" },
  addEventListener: (name, fn) => (bodyListeners[name] = bodyListeners[name] || []).push(fn),
};
const sandbox = {
  document: {
    body,
    querySelectorAll,
    querySelector: (selector) => (selector === "[data-live-refresh]" ? refresher : null),
  },
  htmx: {
    process: (el) => processed.push(el),
    trigger: (elt, name) => {
      assert.equal(elt, body);
      refreshes.push(name);
    },
  },
  location: {
    protocol: "https:",
    host: "nvke.example",
    href: "https://nvke.example/pools/7/",
    assign: (url) => assigned.push(url),
  },
  WebSocket: FakeWebSocket,
  setTimeout: (fn, delay) => timers.push({ fn, delay }),
  Math,
  JSON,
  String,
  Array,
  Error,
  Promise,
};
sandbox.window = sandbox;
vm.createContext(sandbox);
sources.forEach((source) => vm.runInContext(source, sandbox));

function send(event) {
  sockets[sockets.length - 1].onmessage({ data: JSON.stringify(event) });
}
function runTimers() {
  const due = timers.splice(0);
  due.forEach((t) => t.fn());
  return due;
}
// How many refreshes were fired at <body> since the last call.
function takeRefreshes() {
  const fired = refreshes.splice(0);
  fired.forEach((name) => assert.equal(name, "nvke-refresh"));
  return fired.length;
}
const byAttr = (attr, id) => elements.find((el) => el.attrs[attr] === id);

(async () => {
  // htmx is told which regions to swap (each one's content, by id) before the socket can open.
  assert.equal(refresher.attrs["hx-select-oob"], "#pool-nodes:innerHTML");
  assert.deepEqual(processed, [refresher]);
  // One socket, on wss:// because the page is on https.
  assert.equal(sockets.length, 1);
  assert.equal(sockets[0].url, "wss://nvke.example/ws/events/?cluster=5");
  assert.equal(body.dataset.liveState, "connecting");
  assert.equal(takeRefreshes(), 0);
  sockets[0].onopen();
  assert.equal(body.dataset.liveState, "open");
  // What happened between the page's render and the socket's opening: one refresh catches up.
  assert.equal(takeRefreshes(), 1);
  // Only the refresher's successful requests are counted as landed refreshes.
  const afterRequest = (detail) => bodyListeners["htmx:afterRequest"].forEach((fn) => fn({ detail }));
  afterRequest({ elt: refresher, successful: true });
  afterRequest({ elt: refresher, successful: false });
  afterRequest({ elt: {}, successful: true });
  assert.equal(body.dataset.liveRefreshes, "1");

  // A pool event updates its badge, its reason, its node count, and refreshes the live regions.
  send({ type: "pool.status", pool: 7, cluster: 5, name: "train", status: "pending", reason: "InsufficientCapacity",
         message: "Waiting", nodes: 1, node_count: 2 });
  assert.equal(byAttr("data-pool-status", "7").textContent, "pending");
  assert.equal(byAttr("data-pool-status", "7").className, "status status-pending");
  assert.equal(byAttr("data-pool-reason", "7").textContent, "InsufficientCapacity: Waiting");
  assert.equal(byAttr("data-pool-nodes", "7").textContent, "1/2");
  send({ type: "pool.status", pool: 7, cluster: 5, name: "train", status: "ready", reason: "", message: "",
         nodes: 2, node_count: 2 });
  assert.equal(byAttr("data-pool-status", "7").textContent, "ready");
  assert.equal(byAttr("data-pool-reason", "7").hidden, true);
  assert.equal(byAttr("data-pool-nodes", "7").textContent, "2/2");
  assert.equal(takeRefreshes(), 2); // one per event: htmx's trigger delay turns a burst into one request

  // Events about other objects change only their own elements and trigger no refresh here.
  send({ type: "cluster.status", cluster: 6, name: "other", status: "running", reason: "", message: "" });
  assert.equal(byAttr("data-cluster-status", "6").textContent, "running");
  assert.equal(byAttr("data-cluster-status", "5").textContent, "provisioning");
  assert.equal(takeRefreshes(), 0);

  // A deleted pool's row goes; another pool's deletion does not leave this page.
  send({ type: "pool.deleted", pool: 8, cluster: 5, name: "old", status: "deleting", reason: "", message: "",
         nodes: 0, node_count: 0 });
  assert.equal(byAttr("data-pool-row", "8"), undefined);
  assert.deepEqual(assigned, []);
  takeRefreshes();

  // A claim placed: its badge and reason change, and the page refreshes (the pool page listens for
  // "claims:<cluster>" so its GPU snapshot follows). A released claim's row goes.
  body.dataset.refreshOn = "pool:7 claims:5";
  send({ type: "claim.status", claim: 30, cluster: 5, namespace: "default", name: "infer", status: "allocated",
         reason: "" });
  assert.equal(byAttr("data-claim-status", "30").textContent, "allocated");
  assert.equal(byAttr("data-claim-status", "30").className, "status status-allocated");
  assert.equal(byAttr("data-claim-reason", "30").hidden, true);
  send({ type: "claim.released", claim: 31, cluster: 5, namespace: "default", name: "old", status: "allocated",
         reason: "" });
  assert.equal(byAttr("data-claim-row", "31"), undefined);
  assert.equal(takeRefreshes(), 2);
  // Another cluster's claims do not refresh this page.
  send({ type: "claim.status", claim: 40, cluster: 9, namespace: "default", name: "x", status: "pending",
         reason: "waiting" });
  assert.equal(takeRefreshes(), 0);
  // A claim detail page whose claim is released goes to the claims list.
  body.dataset.goneOn = "claim:30";
  body.dataset.goneUrl = "/clusters/5/claims/";
  send({ type: "claim.released", claim: 30, cluster: 5, namespace: "default", name: "infer", status: "allocated",
         reason: "" });
  assert.deepEqual(assigned, ["/clusters/5/claims/"]);
  assert.equal(takeRefreshes(), 0); // leaving the page instead
  assigned.length = 0;
  body.dataset.goneOn = "pool:7";
  body.dataset.goneUrl = "/clusters/5/";

  // A fleet rollout's events (operators' pages): its badge follows, and pages listening for
  // "rollout:<id>" refresh on its status and its runs' events, not on another rollout's.
  const rolloutBadge = makeElement({ "data-rollout-status": "3" }, "running");
  rolloutBadge.parentNode = parent;
  elements.push(rolloutBadge);
  body.dataset.refreshOn = "rollout:3";
  send({ type: "rollout.status", rollout: 3, status: "paused", wave: 1 });
  assert.equal(rolloutBadge.textContent, "paused");
  assert.equal(rolloutBadge.className, "status status-paused");
  assert.equal(takeRefreshes(), 1);
  send({ type: "rollout.run", rollout: 3, run: 12, pool: 7, cluster: 5, status: "running", wave: 1 });
  assert.equal(takeRefreshes(), 1);
  send({ type: "rollout.run", rollout: 4, run: 13, pool: 7, cluster: 5, status: "running", wave: 0 });
  assert.equal(takeRefreshes(), 0);
  body.dataset.refreshOn = "*";

  // Garbage, messages without a type and unknown events are ignored.
  sockets[0].onmessage({ data: "not json" });
  sockets[0].onmessage({ data: "[1, 2]" });
  send({ type: "something.else", cluster: 5 });
  assert.equal(takeRefreshes(), 0);

  // A dropped socket reconnects after socket.js's backoff (1 s, then 2 s, each times 0.5–1), back to
  // 1 s once one opens, and refreshes on reopening.
  const delays = [];
  for (let drop = 0; drop < 7; drop++) {
    sockets[sockets.length - 1].onclose({ code: 1006 });
    assert.equal(body.dataset.liveState, "reconnecting");
    assert.equal(timers.length, 1);
    delays.push(timers[0].delay);
    runTimers();
  }
  [1000, 2000, 4000, 8000, 16000, 30000, 30000].forEach((base, i) => {
    assert.ok(delays[i] >= base / 2 && delays[i] <= base, `delay ${i}: ${delays[i]} for ${base}`);
  });
  assert.equal(sockets.length, 8);
  assert.equal(takeRefreshes(), 0); // nothing while down
  sockets[7].onopen();
  assert.equal(body.dataset.liveState, "open");
  assert.equal(takeRefreshes(), 1); // the catch-up refresh
  sockets[7].onclose({ code: 1006 });
  assert.ok(timers[0].delay <= 1000, `delay after an open ${timers[0].delay}`);
  runTimers();
  const last = sockets[sockets.length - 1];
  last.onopen();
  takeRefreshes();

  // Refused by the server (4403): no retry.
  last.onclose({ code: 4403 });
  assert.equal(timers.length, 0);
  assert.equal(body.dataset.liveState, "off");

  // The page's own pool deleted: go to the cluster.
  send({ type: "pool.deleted", pool: 7, cluster: 5, name: "train", status: "deleting", reason: "", message: "",
         nodes: 0, node_count: 2 });
  assert.deepEqual(assigned, ["/clusters/5/"]);
  console.log("live.js ok");
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
