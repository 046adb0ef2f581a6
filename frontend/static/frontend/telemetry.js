/* Live telemetry charts. No framework, no build step, no CDN: plain canvas drawing.
 *
 * The page's .telemetry element names its websocket (data-telemetry-ws). The server sends
 *   {"type": "telemetry.hello", "gpus": [{id, name, pool, pool_name, memory_mib, ...}], "columns": [...],
 *    "latest": [[id, ts, util, ...], ...]}  once (the current values), then
 *   {"type": "telemetry.frame", "columns": [...], "gpus": [[id, ts, util, mem, ...], ...]}  at most one
 *   per interval with the GPUs that changed, and {"type": "telemetry.event", ...} for decisions.
 * Every element [data-series="gpu-<id>"] or [data-series="pool-<id>"] gets its two charts
 * ([data-chart="util"], [data-chart="mem"], in %) and its current values ([data-value=...]);
 * canvas[data-heatmap] gets one cell per GPU coloured by utilization.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-telemetry-ws]");
  if (!root || !("WebSocket" in window)) return;

  var FORBIDDEN = 4403;
  var KEEP = 120; // points per series
  var gpus = {}; // id -> hello entry plus .latest
  var series = {}; // "gpu-<id>" / "pool-<id>" -> {util: [[ts, v]], mem: [[ts, v]], latest: {}}
  var drawPending = false;
  var attempts = 0;
  var state = document.querySelector("[data-telemetry-state]");

  function setState(text) {
    if (state) state.textContent = text;
  }

  function seriesFor(key) {
    return series[key] || (series[key] = { util: [], mem: [], latest: {} });
  }

  function push(key, ts, util, memPercent, latest) {
    var s = seriesFor(key);
    if (s.util.length && s.util[s.util.length - 1][0] >= ts) return;
    s.util.push([ts, util]);
    s.mem.push([ts, memPercent]);
    if (s.util.length > KEEP) { s.util.shift(); s.mem.shift(); }
    s.latest = latest;
  }

  function onHello(message) {
    gpus = {};
    message.gpus.forEach(function (gpu) { gpus[gpu.id] = gpu; });
    setState("Live: " + message.gpus.length + " GPUs.");
    if (message.latest && message.latest.length) onFrame({ columns: message.columns, gpus: message.latest });
  }

  function onFrame(message) {
    var col = {};
    message.columns.forEach(function (name, i) { col[name] = i; });
    var touchedPools = {};
    var newest = 0;
    message.gpus.forEach(function (row) {
      var gpu = gpus[row[0]];
      if (!gpu) return;
      var latest = {};
      message.columns.forEach(function (name, i) { latest[name] = row[i]; });
      gpu.latest = latest;
      newest = Math.max(newest, latest.ts);
      push("gpu-" + gpu.id, latest.ts, latest.util, 100 * latest.mem / gpu.memory_mib, latest);
      touchedPools[gpu.pool] = true;
    });
    Object.keys(touchedPools).forEach(function (pool) {
      var util = 0, n = 0, used = 0, total = 0;
      Object.keys(gpus).forEach(function (id) {
        var gpu = gpus[id];
        if (String(gpu.pool) !== pool || !gpu.latest) return;
        util += gpu.latest.util; n += 1; used += gpu.latest.mem; total += gpu.memory_mib;
      });
      if (n) push("pool-" + pool, newest, util / n, 100 * used / total, { util: util / n, mem: used });
    });
    scheduleDraw();
  }

  function onEvent(event) {
    var log = root.querySelector("[data-telemetry-events]");
    if (!log || !event.kind) return;
    var empty = log.querySelector("[data-empty]");
    if (empty) log.removeChild(empty);
    var item = document.createElement("li");
    item.className = "event event-" + event.kind.replace(/\W+/g, "-");
    var strong = document.createElement("strong");
    strong.textContent = event.kind;
    item.appendChild(document.createTextNode(new Date().toLocaleTimeString() + " "));
    item.appendChild(strong);
    item.appendChild(document.createTextNode(" " + event.message));
    log.insertBefore(item, log.firstChild);
  }

  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    window.requestAnimationFrame(function () {
      drawPending = false;
      draw();
    });
  }

  function colour(percent) {
    // 0 % blue-grey → 50 % green → 100 % red
    var p = Math.max(0, Math.min(100, percent)) / 100;
    var hue = 200 - 200 * p;
    return "hsl(" + hue + ", 70%, " + (45 + 10 * (1 - p)) + "%)";
  }

  function drawLine(canvas, points, label) {
    var ctx = canvas.getContext("2d");
    var w = canvas.width, h = canvas.height, pad = 18;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#d0d7de";
    ctx.lineWidth = 1;
    [0, 50, 100].forEach(function (v) {
      var y = h - pad - (h - 2 * pad) * v / 100;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 4, y); ctx.stroke();
    });
    ctx.fillStyle = "#57606a";
    ctx.font = "11px sans-serif";
    ctx.fillText(label, pad + 2, 12);
    if (points.length < 2) return;
    var t0 = points[0][0], t1 = points[points.length - 1][0], span = Math.max(1, t1 - t0);
    ctx.strokeStyle = label.indexOf("Memory") === 0 ? "#8250df" : "#1a7f37";
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach(function (p, i) {
      var x = pad + (w - pad - 4) * (p[0] - t0) / span;
      var y = h - pad - (h - 2 * pad) * Math.max(0, Math.min(100, p[1])) / 100;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }

  function format(name, value) {
    if (value === null || value === undefined) return "–";
    if (name === "util") return value.toFixed(0) + " %";
    if (name === "mem") return (value / 1024).toFixed(1) + " GiB";
    if (name === "temp") return value.toFixed(0) + " °C";
    if (name === "power") return value.toFixed(0) + " W";
    if (name === "sm") return value.toFixed(0) + " MHz";
    return String(value);
  }

  function drawHeatmap(canvas) {
    var ids = Object.keys(gpus);
    var ctx = canvas.getContext("2d");
    var w = canvas.width;
    var cell = Math.max(4, Math.floor(Math.sqrt((w * canvas.height) / Math.max(1, ids.length))));
    var perRow = Math.max(1, Math.floor(w / cell));
    var rows = Math.ceil(ids.length / perRow);
    if (canvas.height !== rows * cell) canvas.height = Math.max(cell, rows * cell);
    ctx.clearRect(0, 0, w, canvas.height);
    ids.forEach(function (id, i) {
      var gpu = gpus[id];
      ctx.fillStyle = gpu.latest ? colour(gpu.latest.util) : "#eaeef2";
      ctx.fillRect((i % perRow) * cell, Math.floor(i / perRow) * cell, cell - 1, cell - 1);
    });
    canvas.onmousemove = function (e) {
      var rect = canvas.getBoundingClientRect();
      var x = Math.floor((e.clientX - rect.left) * (w / rect.width) / cell);
      var y = Math.floor((e.clientY - rect.top) * (canvas.height / rect.height) / cell);
      var gpu = gpus[ids[y * perRow + x]];
      var caption = document.querySelector("[data-heatmap-caption]");
      if (gpu && caption) {
        caption.textContent = gpu.name + (gpu.latest ? ": " + format("util", gpu.latest.util) : ": no data yet");
      }
    };
  }

  function draw() {
    Array.prototype.forEach.call(root.querySelectorAll("[data-series]"), function (el) {
      var s = series[el.dataset.series];
      if (!s) return;
      Array.prototype.forEach.call(el.querySelectorAll("[data-chart]"), function (canvas) {
        var kind = canvas.dataset.chart;
        drawLine(canvas, s[kind], kind === "util" ? "Utilization %" : "Memory used %");
      });
      Array.prototype.forEach.call(el.querySelectorAll("[data-value]"), function (span) {
        span.textContent = format(span.dataset.value, s.latest[span.dataset.value]);
      });
    });
    var heatmap = root.querySelector("[data-heatmap]");
    if (heatmap) drawHeatmap(heatmap);
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var socket = new WebSocket(scheme + "//" + location.host + root.dataset.telemetryWs);
    socket.onopen = function () { attempts = 0; };
    socket.onmessage = function (message) {
      var data = JSON.parse(message.data);
      if (data.type === "telemetry.hello") onHello(data);
      else if (data.type === "telemetry.frame") onFrame(data);
      else if (data.type === "telemetry.event") onEvent(data);
    };
    socket.onclose = function (event) {
      if (event.code === FORBIDDEN) { setState("This stream is not available to you."); return; }
      attempts += 1;
      setState("Disconnected; reconnecting…");
      window.setTimeout(connect, Math.min(30000, 500 * Math.pow(2, attempts)));
    };
  }

  connect();
})();
