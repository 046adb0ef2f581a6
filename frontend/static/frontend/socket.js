/* The one websocket client of NVKE's pages (live.js, telemetry.js). No framework, no build step.
 *
 *   NVKE.socket.open(path, {onOpen(), onMessage(message), onState(state)})
 *
 * opens ws(s)://<this host><path>, hands every JSON object with a string "type" to onMessage (anything
 * else is dropped), and reconnects after a drop with one backoff policy: 1 s, 2 s, 4 s … up to 30 s, each
 * times a random 0.5–1 (so a restarted server is not hit by every page at once), back to 1 s once a
 * socket opens. A close with 4403 (the server refused this stream: signed out, another tenant's
 * cluster) is final. onState gets "connecting", "open", "reconnecting" or "off"; onOpen runs on every
 * open, the first and each reconnect, so a page can catch up on what it missed meanwhile.
 */
(function () {
  "use strict";

  var FORBIDDEN = 4403;
  var FIRST_DELAY_MS = 1000;
  var MAX_DELAY_MS = 30000;

  // The wait before reconnect attempt number `attempts` (0 for the first after a drop).
  function delay(attempts) {
    return Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * Math.pow(2, attempts)) * (0.5 + Math.random() / 2);
  }

  function open(path, handlers) {
    var noop = function () {};
    var onOpen = handlers.onOpen || noop;
    var onMessage = handlers.onMessage || noop;
    var onState = handlers.onState || noop;
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var attempts = 0;
    if (!("WebSocket" in window)) {
      onState("off");
      return;
    }

    function connect() {
      var socket = new WebSocket(scheme + "//" + location.host + path);
      socket.onopen = function () {
        attempts = 0;
        onState("open");
        onOpen();
      };
      socket.onmessage = function (message) {
        var data;
        try {
          data = JSON.parse(message.data);
        } catch (error) {
          return;
        }
        if (data && typeof data.type === "string") onMessage(data);
      };
      socket.onclose = function (close) {
        if (close.code === FORBIDDEN) {
          onState("off");
          return;
        }
        onState("reconnecting");
        setTimeout(connect, delay(attempts));
        attempts += 1;
      };
    }

    onState("connecting");
    connect();
  }

  window.NVKE = window.NVKE || {};
  window.NVKE.socket = { open: open };
})();
