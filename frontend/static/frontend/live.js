/* Live updates for NVKE pages: websocket events (socket.js) change badges in place, and htmx re-fetches
 * the page's live regions. No build step.
 *
 * The socket's path comes from <body data-ws-url>. Events update elements by data attribute:
 *   data-cluster-status="<id>" / data-pool-status="<id>"  text and class from event.status
 *   data-cluster-reason="<id>" / data-pool-reason="<id>"  "reason: message"
 *   data-pool-nodes="<id>"                                "nodes/node_count"
 *   data-claim-status="<id>" / data-claim-reason="<id>"   a GPU claim's status and pending reason
 *   data-cluster-row="<id>" / data-pool-row="<id>"        removed when the object is deleted
 *   data-claim-row="<id>"                                 removed when the claim is released
 *   data-rollout-status="<id>"                            a fleet rollout's status (operators' pages)
 * Elements with data-live-region and an id are re-fetched from the server (the page itself) when an
 * event matches <body data-refresh-on> (space-separated keys: "cluster:<id>", "pool:<id>",
 * "claim:<id>", "claims:<cluster id>" for any claim of a cluster, "rollout:<id>" for a fleet rollout and
 * its runs, or "*"), and each time the socket opens, since events may have been missed between the
 * page's render (or a drop) and then. The re-fetch is htmx's: base.html's [data-live-refresh] element
 * GETs the page on the body's "nvke-refresh" event (400 ms after the last of a burst) and swaps the
 * content of each region from the response (hx-select-oob, which this script fills in), nothing else;
 * <body data-live-refreshes> counts those that landed. When the page's own object is deleted or
 * released (<body data-gone-on>), the browser goes to <body data-gone-url>.
 * The connection's state is <body data-live-state> ("connecting", "open", "reconnecting", "off"), and
 * [data-live-indicator] elements say it in words.
 */
(function () {
  "use strict";

  var body = document.body;
  var path = body && body.dataset.wsUrl;
  var refresher = document.querySelector("[data-live-refresh]");
  if (!path || !refresher || !window.NVKE || !window.htmx) return;

  var REFRESH_EVENT = "nvke-refresh"; // what [data-live-refresh]'s hx-trigger listens for on <body>

  var STATE_TEXT = {
    connecting: "Connecting…",
    open: "Live",
    reconnecting: "Reconnecting…",
    off: "Not live — reload the page",
  };

  function setState(state) {
    body.dataset.liveState = state;
    each("data-live-indicator", "page", function (el) {
      el.textContent = STATE_TEXT[state];
      el.className = "live-indicator live-" + state;
      el.hidden = false;
    });
  }

  function each(attr, id, fn) {
    var selector = "[" + attr + '="' + String(id).replace(/["\\]/g, "") + '"]';
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
  }

  function setStatus(attr, id, status) {
    each(attr, id, function (el) {
      el.textContent = status; // exactly the status string: tests and people read it
      el.className = "status status-" + status;
    });
  }

  function setReason(attr, id, event) {
    var text = event.reason ? event.reason + (event.message ? ": " + event.message : "") : "";
    each(attr, id, function (el) {
      el.textContent = text;
      el.hidden = !text;
    });
  }

  function removeRows(attr, id) {
    each(attr, id, function (el) {
      el.parentNode.removeChild(el);
    });
  }

  function isClaimEvent(event) {
    return event.type.indexOf("claim.") === 0;
  }

  // The object the event is about: "claim:<id>", "pool:<id>" or "cluster:<id>".
  function ownKey(event) {
    if (isClaimEvent(event)) return "claim:" + event.claim;
    return event.type.indexOf("pool.") === 0 ? "pool:" + event.pool : "cluster:" + event.cluster;
  }

  // A pool's or a claim's events also concern its cluster's pages (a claim's, its pool's too); a claim's,
  // the pages of claims; a rollout's run, the rollout's pages.
  function keys(event) {
    if (event.type.indexOf("rollout.") === 0) return ["rollout:" + event.rollout];
    var result = ["cluster:" + event.cluster];
    if (event.pool != null) result.push("pool:" + event.pool);
    if (event.from_pool != null) result.push("pool:" + event.from_pool); // a claim moved out of it
    if (isClaimEvent(event)) result.push("claims:" + event.cluster, "claim:" + event.claim);
    if (event.type === "telemetry.event" && event.claim != null) result.push("claim:" + event.claim);
    return result;
  }

  function listed(attrValue, candidates) {
    var wanted = (attrValue || "").split(/\s+/).filter(Boolean);
    if (wanted.indexOf("*") !== -1) return true;
    return candidates.some(function (key) {
      return wanted.indexOf(key) !== -1;
    });
  }

  // Swap the content of every region, each by its id, from the fresh page.
  refresher.setAttribute(
    "hx-select-oob",
    Array.prototype.map
      .call(document.querySelectorAll("[data-live-region][id]"), function (el) {
        return "#" + el.id + ":innerHTML";
      })
      .join(",")
  );
  // Now, not at htmx's own start: the socket may open first, and its catch-up must find the listener.
  htmx.process(refresher);

  body.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt !== refresher || event.detail.successful !== true) return;
    // How many re-fetches have landed: lets a test tell the catch-up on open from a later event's.
    body.dataset.liveRefreshes = String(Number(body.dataset.liveRefreshes || 0) + 1);
  });

  function refresh() {
    htmx.trigger(body, REFRESH_EVENT);
  }

  function handle(event) {
    switch (event.type) {
      case "cluster.status":
        setStatus("data-cluster-status", event.cluster, event.status);
        setReason("data-cluster-reason", event.cluster, event);
        break;
      case "cluster.deleted":
        removeRows("data-cluster-row", event.cluster);
        break;
      case "pool.status":
        setStatus("data-pool-status", event.pool, event.status);
        setReason("data-pool-reason", event.pool, event);
        each("data-pool-nodes", event.pool, function (el) {
          el.textContent = event.nodes + "/" + event.node_count;
        });
        break;
      case "pool.deleted":
        removeRows("data-pool-row", event.pool);
        break;
      case "claim.status":
      case "claim.moved":
        setStatus("data-claim-status", event.claim, event.status);
        setReason("data-claim-reason", event.claim, event);
        break;
      case "claim.released":
        removeRows("data-claim-row", event.claim);
        break;
      case "telemetry.event":
        break; // a rescaling or health decision: its claim's page and its cluster's pages re-fetch
      case "upgrade.run":
      case "upgrade.node":
        break; // a driver upgrade's page re-fetches its node grid and history (data-refresh-on pool:<id>)
      case "rollout.status":
        setStatus("data-rollout-status", event.rollout, event.status);
        break;
      case "rollout.run":
        break; // a rollout's pages re-fetch their waves (data-refresh-on rollout:<id>)
      default:
        return;
    }
    if (/\.(deleted|released)$/.test(event.type) && listed(body.dataset.goneOn, [ownKey(event)])) {
      location.assign(body.dataset.goneUrl);
      return;
    }
    if (listed(body.dataset.refreshOn, keys(event))) refresh();
  }

  NVKE.socket.open(path, {
    onState: setState,
    onOpen: refresh, // catch up on what happened since the page was rendered, or while the socket was down
    onMessage: handle,
  });
})();
