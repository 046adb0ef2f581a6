// Runs frontend/static/frontend/live.js against a tiny fake DOM, WebSocket, timers and fetch, and checks
// what it does with each kind of event. Run by test_live_js.py (node, no packages); exits non-zero on failure.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const source = fs.readFileSync(path.join(__dirname, "../../frontend/static/frontend/live.js"), "utf8");

function makeElement(attrs, text) {
  return {
    attrs,
    id: attrs.id || "",
    textContent: text || "",
    className: "",
    hidden: false,
    innerHTML: "old",
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

// Status badges on the page as the server renders it now (set by each check).
let freshBadges = {};
const sockets = [];
class FakeWebSocket {
  constructor(url) {
    this.url = url;
    sockets.push(this);
  }
}
const timers = [];
const fetches = [];
const assigned = [];
const sandbox = {
  document: {
    body: { dataset: { wsUrl: "/ws/events/?cluster=5", refreshOn: "pool:7", goneOn: "pool:7", goneUrl: "/clusters/5/" } },
    querySelectorAll,
  },
  location: {
    protocol: "https:",
    host: "nvke.example",
    href: "https://nvke.example/pools/7/",
    assign: (url) => assigned.push(url),
  },
  WebSocket: FakeWebSocket,
  setTimeout: (fn, delay) => timers.push({ fn, delay }),
  clearTimeout: () => {},
  fetch: (url, options) => {
    fetches.push({ url, options });
    return Promise.resolve({ ok: true, text: () => Promise.resolve("<html></html>") });
  },
  DOMParser: class {
    parseFromString() {
      return {
        getElementById: (id) => ({ innerHTML: `fresh ${id}` }),
        querySelector: (selector) => freshBadges[selector] || null,
      };
    }
  },
  Math,
  JSON,
  String,
  Array,
  Error,
  Promise,
};
sandbox.window = sandbox;
vm.createContext(sandbox);
vm.runInContext(source, sandbox);

function send(event) {
  sockets[sockets.length - 1].onmessage({ data: JSON.stringify(event) });
}
function runTimers() {
  const due = timers.splice(0);
  due.forEach((t) => t.fn());
  return due;
}
const byAttr = (attr, id) => elements.find((el) => el.attrs[attr] === id);

(async () => {
  // One socket, on wss:// because the page is on https.
  assert.equal(sockets.length, 1);
  assert.equal(sockets[0].url, "wss://nvke.example/ws/events/?cluster=5");
  assert.equal(sandbox.document.body.dataset.liveState, "connecting");
  sockets[0].onopen();
  assert.equal(sandbox.document.body.dataset.liveState, "open");
  // What happened between the page's render and the socket's opening: one refresh catches up, badges
  // outside the live regions included (cluster 5 started running meanwhile).
  freshBadges = { '[data-cluster-status="5"]': { textContent: "running", className: "status status-running" } };
  assert.equal(runTimers().length, 1);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(fetches.length, 1);
  assert.equal(byAttr("data-cluster-status", "5").textContent, "running");
  assert.equal(byAttr("data-cluster-status", "5").className, "status status-running");
  assert.equal(byAttr("data-pool-status", "7").textContent, "provisioning"); // not on the fresh page: kept
  fetches.length = 0;
  freshBadges = {};
  byAttr("data-cluster-status", "5").textContent = "provisioning";

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
  assert.equal(runTimers().length, 2); // debounced: the later timer is the one that fetches (clearTimeout is a stub)
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(fetches[0].url, "https://nvke.example/pools/7/");
  assert.equal(fetches[0].options.credentials, "same-origin");
  assert.equal(byAttr("data-live-region", "").innerHTML, "fresh pool-nodes");

  // Events about other objects change only their own elements and trigger no refresh here.
  send({ type: "cluster.status", cluster: 6, name: "other", status: "running", reason: "", message: "" });
  assert.equal(byAttr("data-cluster-status", "6").textContent, "running");
  assert.equal(byAttr("data-cluster-status", "5").textContent, "provisioning");
  assert.equal(timers.length, 0);

  // A deleted pool's row goes; another pool's deletion does not leave this page.
  send({ type: "pool.deleted", pool: 8, cluster: 5, name: "old", status: "deleting", reason: "", message: "",
         nodes: 0, node_count: 0 });
  assert.equal(byAttr("data-pool-row", "8"), undefined);
  assert.deepEqual(assigned, []);

  // A claim placed: its badge and reason change, and the page refreshes (the pool page listens for
  // "claims:<cluster>" so its GPU snapshot follows). A released claim's row goes.
  sandbox.document.body.dataset.refreshOn = "pool:7 claims:5";
  const fetchedBefore = fetches.length;
  send({ type: "claim.status", claim: 30, cluster: 5, namespace: "default", name: "infer", status: "allocated",
         reason: "" });
  assert.equal(byAttr("data-claim-status", "30").textContent, "allocated");
  assert.equal(byAttr("data-claim-status", "30").className, "status status-allocated");
  assert.equal(byAttr("data-claim-reason", "30").hidden, true);
  send({ type: "claim.released", claim: 31, cluster: 5, namespace: "default", name: "old", status: "allocated",
         reason: "" });
  assert.equal(byAttr("data-claim-row", "31"), undefined);
  assert.equal(runTimers().length, 2);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(fetches.length, fetchedBefore + 2);
  // Another cluster's claims do not refresh this page.
  send({ type: "claim.status", claim: 40, cluster: 9, namespace: "default", name: "x", status: "pending",
         reason: "waiting" });
  assert.equal(timers.length, 0);
  // A claim detail page whose claim is released goes to the claims list.
  sandbox.document.body.dataset.goneOn = "claim:30";
  sandbox.document.body.dataset.goneUrl = "/clusters/5/claims/";
  send({ type: "claim.released", claim: 30, cluster: 5, namespace: "default", name: "infer", status: "allocated",
         reason: "" });
  assert.deepEqual(assigned, ["/clusters/5/claims/"]);
  assigned.length = 0;
  sandbox.document.body.dataset.goneOn = "pool:7";
  sandbox.document.body.dataset.goneUrl = "/clusters/5/";
  sandbox.document.body.dataset.refreshOn = "pool:7";

  // A fleet rollout's events (operators' pages): its badge follows, and pages listening for
  // "rollout:<id>" refresh on its status and its runs' events, not on another rollout's.
  const rolloutBadge = makeElement({ "data-rollout-status": "3" }, "running");
  rolloutBadge.parentNode = parent;
  elements.push(rolloutBadge);
  sandbox.document.body.dataset.refreshOn = "rollout:3";
  send({ type: "rollout.status", rollout: 3, status: "paused", wave: 1 });
  assert.equal(rolloutBadge.textContent, "paused");
  assert.equal(rolloutBadge.className, "status status-paused");
  assert.equal(runTimers().length, 1);
  send({ type: "rollout.run", rollout: 3, run: 12, pool: 7, cluster: 5, status: "running", wave: 1 });
  assert.equal(runTimers().length, 1);
  send({ type: "rollout.run", rollout: 4, run: 13, pool: 7, cluster: 5, status: "running", wave: 0 });
  assert.equal(timers.length, 0);
  sandbox.document.body.dataset.refreshOn = "pool:7";

  // Garbage and unknown events are ignored.
  sockets[0].onmessage({ data: "not json" });
  send({ type: "something.else", cluster: 5 });

  // A dropped socket reconnects after a backoff delay (1 s ± jitter first) and refreshes on reopening.
  sockets[0].onclose({ code: 1006 });
  assert.equal(sandbox.document.body.dataset.liveState, "reconnecting");
  assert.equal(timers.length, 1);
  assert.ok(timers[0].delay >= 500 && timers[0].delay <= 1000, `delay ${timers[0].delay}`);
  runTimers();
  assert.equal(sockets.length, 2);
  sockets[1].onclose({ code: 1006 });
  assert.ok(timers[0].delay >= 1000 && timers[0].delay <= 2000, `second delay ${timers[0].delay}`);
  runTimers();
  assert.equal(sockets.length, 3);
  sockets[2].onopen();
  assert.equal(timers.length, 1); // the catch-up refresh
  runTimers();

  // Refused by the server (4403): no retry.
  sockets[2].onclose({ code: 4403 });
  assert.equal(timers.length, 0);
  assert.equal(sandbox.document.body.dataset.liveState, "off");

  // The page's own pool deleted: go to the cluster.
  send({ type: "pool.deleted", pool: 7, cluster: 5, name: "train", status: "deleting", reason: "", message: "",
         nodes: 0, node_count: 2 });
  assert.deepEqual(assigned, ["/clusters/5/"]);
  console.log("live.js ok");
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
