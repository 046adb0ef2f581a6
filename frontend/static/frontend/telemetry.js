/* Live telemetry charts: uPlot time series (vendored, no build step, no CDN) and a canvas heatmap.
 *
 * The page's .telemetry element names its websocket (data-telemetry-ws), opened through socket.js. The
 * server sends
 *   {"type": "telemetry.hello", "gpus": [{id, name, pool, pool_name, memory_mib, ...}], "columns": [...],
 *    "latest": [[id, ts, util, ...], ...]}  once (the current values), then
 *   {"type": "telemetry.frame", "columns": [...], "gpus": [[id, ts, util, mem, ...], ...]}  at most one
 *   per interval with the GPUs that changed, and {"type": "telemetry.event", ...} for decisions.
 * Every element [data-series="gpu-<id>"] or [data-series="pool-<id>"] gets its chart in [data-chart]
 * (utilization and memory used, in %, over time: a time axis, a legend with the values under the
 * cursor, drawn at the screen's pixel density) and its current values ([data-value=...]);
 * canvas[data-heatmap] gets one cell per GPU coloured by utilization; a click on a cell opens that
 * GPU's page (data-gpu-url, its id in place of 0). The charts start from the page's kept history
 * (#telemetry-history).
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-telemetry-ws]");
  if (!root || !window.NVKE || !window.uPlot) return;

  var KEEP = 120; // points per series
  var gpus = {}; // id -> hello entry plus .latest
  // "gpu-<id>" / "pool-<id>" -> {ts: [], util: [], mem: [], latest: {}, dirty}: uPlot's columns
  var series = {};
  var charts = {}; // same keys -> uPlot instance
  var drawPending = false;
  var state = document.querySelector("[data-telemetry-state]");
  var STATE_TEXT = { reconnecting: "Disconnected; reconnecting…", off: "This stream is not available to you." };
  var clock = uPlot.fmtDate("{HH}:{mm}:{ss}");

  function setState(text) {
    if (state) state.textContent = text;
  }

  function seriesFor(key) {
    return series[key] || (series[key] = { ts: [], util: [], mem: [], latest: {}, dirty: false });
  }

  function push(key, ts, util, memPercent, latest) {
    var s = seriesFor(key);
    if (s.ts.length && s.ts[s.ts.length - 1] >= ts) return;
    s.ts.push(ts);
    s.util.push(util);
    s.mem.push(memPercent);
    if (s.ts.length > KEEP) { s.ts.shift(); s.util.shift(); s.mem.shift(); }
    s.latest = latest;
    s.dirty = true;
  }

  function onHello(message) {
    gpus = {};
    message.gpus.forEach(function (gpu) { gpus[gpu.id] = gpu; });
    var count = message.gpus.length;
    setState("Live: " + count + (count === 1 ? " GPU." : " GPUs."));
    if (message.latest && message.latest.length) onFrame({ columns: message.columns, gpus: message.latest });
    scheduleDraw(); // the heatmap's cells, "no data yet" until a sample comes
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

  var MIN_SPAN_S = 60; // the time axis spans at least a minute, so a few samples are not stretched over it
  var TICK_INCRS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600]; // whole seconds, never less

  // The legend shows the values under the cursor and, with no cursor on the chart, the newest ones.
  function legendValue(format) {
    return function (chart, value, seriesIndex, index) {
      if (index == null) {
        var column = chart.data[seriesIndex];
        value = column.length ? column[column.length - 1] : null;
      }
      return value == null ? "–" : format(value);
    };
  }

  function percent(value) {
    return value.toFixed(0) + " %";
  }

  function time(ts) {
    return clock(new Date(ts * 1000));
  }

  // One chart per [data-chart] element, sized to it (and again when it resizes). uPlot scales its
  // canvas by devicePixelRatio itself, so lines and labels stay sharp on HiDPI screens.
  function makeChart(el) {
    var height = Number(el.dataset.chartHeight) || 150;
    var chart = new uPlot(
      {
        width: Math.max(200, el.clientWidth),
        height: height,
        scales: {
          x: {
            time: true,
            range: function (u, min, max) {
              if (min == null) return [Date.now() / 1000 - MIN_SPAN_S, Date.now() / 1000];
              return [Math.min(min, max - MIN_SPAN_S), max];
            },
          },
          y: { range: [0, 100] },
        },
        axes: [
          {
            incrs: TICK_INCRS_S,
            values: function (u, splits) {
              var labels = splits.map(time);
              // Axis labels are drawn on the canvas: the element also carries them as text.
              el.dataset.timeTicks = labels.join(" ");
              return labels;
            },
          },
          { values: function (u, splits) { return splits.map(function (v) { return v + " %"; }); }, size: 56 },
        ],
        series: [
          { label: "Time", value: legendValue(time) },
          { label: "Utilization", stroke: "#1a7f37", width: 2, value: legendValue(percent) },
          { label: "Memory used", stroke: "#8250df", width: 2, value: legendValue(percent) },
        ],
      },
      [[], [], []],
      el
    );
    if ("ResizeObserver" in window) {
      new ResizeObserver(function () {
        if (el.clientWidth && el.clientWidth !== chart.width) chart.setSize({ width: el.clientWidth, height: height });
      }).observe(el);
    }
    return chart;
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

  // Laid out in CSS pixels, drawn at the screen's pixel density, as the uPlot charts are.
  var HEATMAP_AREA_H = 120; // CSS pixels the cells of a fleet share, whatever its size
  function drawHeatmap(canvas) {
    var ids = Object.keys(gpus);
    var ctx = canvas.getContext("2d");
    var ratio = window.devicePixelRatio || 1;
    var w = canvas.clientWidth || canvas.width;
    var cell = Math.max(4, Math.floor(Math.sqrt((w * HEATMAP_AREA_H) / Math.max(1, ids.length))));
    var perRow = Math.max(1, Math.floor(w / cell));
    var h = Math.max(cell, Math.ceil(ids.length / perRow) * cell);
    canvas.style.height = h + "px";
    if (canvas.width !== Math.round(w * ratio)) canvas.width = Math.round(w * ratio);
    if (canvas.height !== Math.round(h * ratio)) canvas.height = Math.round(h * ratio);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ids.forEach(function (id, i) {
      var gpu = gpus[id];
      ctx.fillStyle = gpu.latest ? colour(gpu.latest.util) : "#eaeef2";
      ctx.fillRect((i % perRow) * cell, Math.floor(i / perRow) * cell, cell - 1, cell - 1);
    });
    canvas.onmousemove = function (e) {
      var rect = canvas.getBoundingClientRect();
      var x = Math.floor((e.clientX - rect.left) / cell);
      var y = Math.floor((e.clientY - rect.top) / cell);
      var gpu = x < perRow ? gpus[ids[y * perRow + x]] : undefined;
      var caption = document.querySelector("[data-heatmap-caption]");
      if (gpu && caption) {
        caption.textContent = gpu.name + (gpu.latest ? ": " + format("util", gpu.latest.util) : ": no data yet");
      }
      canvas.style.cursor = gpu ? "pointer" : "default";
    };
    canvas.onclick = function (e) {
      var rect = canvas.getBoundingClientRect();
      var x = Math.floor((e.clientX - rect.left) / cell);
      var y = Math.floor((e.clientY - rect.top) / cell);
      var id = x < perRow ? ids[y * perRow + x] : undefined;
      if (id !== undefined && canvas.dataset.gpuUrl) window.location.href = canvas.dataset.gpuUrl.replace("/0/", "/" + id + "/");
    };
  }

  function draw() {
    Array.prototype.forEach.call(root.querySelectorAll("[data-series]"), function (el) {
      var key = el.dataset.series;
      var s = series[key];
      if (!s || !s.dirty) return;
      s.dirty = false;
      var chart = charts[key];
      if (chart) {
        chart.setData([s.ts, s.util, s.mem]);
        if (chart.cursor.idx == null) chart.setLegend({ idx: null }); // the newest values, not the last hover's
      }
      Array.prototype.forEach.call(el.querySelectorAll("[data-value]"), function (span) {
        span.textContent = format(span.dataset.value, s.latest[span.dataset.value]);
      });
    });
    var heatmap = root.querySelector("[data-heatmap]");
    if (heatmap) drawHeatmap(heatmap);
  }

  // Empty charts (axes, legend) from the start; the data fills them as it comes.
  Array.prototype.forEach.call(root.querySelectorAll("[data-series]"), function (el) {
    var target = el.querySelector("[data-chart]");
    if (target) charts[el.dataset.series] = makeChart(target);
  });

  // The kept 10 s history first (embedded by the page, frontend/chart_history.py): the charts open with
  // the last minutes drawn, and the stream carries on from them.
  var kept = document.getElementById("telemetry-history");
  if (kept) {
    var history = JSON.parse(kept.textContent);
    Object.keys(history).forEach(function (key) {
      var h = history[key];
      h.ts.forEach(function (ts, i) { push(key, ts, h.util[i], h.mem[i], { util: h.util[i], mem: h.used[i] }); });
    });
    scheduleDraw();
  }

  NVKE.socket.open(root.dataset.telemetryWs, {
    onState: function (name) {
      if (STATE_TEXT[name]) setState(STATE_TEXT[name]); // "Live: …" comes with the hello
    },
    onMessage: function (data) {
      if (data.type === "telemetry.hello") onHello(data);
      else if (data.type === "telemetry.frame") onFrame(data);
      else if (data.type === "telemetry.event") onEvent(data);
    },
  });
})();
