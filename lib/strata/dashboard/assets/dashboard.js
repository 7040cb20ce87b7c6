// The Strata dashboard page: polls data.json once a second and draws what it holds: the tiers'
// figures (as `strata stats` prints them), line charts of the time series the dashboard keeps,
// the top keys and tags the app processes sampled, and the VM watch's reports. Plain DOM and SVG; every text from the
// server goes in through textContent, never as markup.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 1000;
  const COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e", "#9c36b5", "#e8590c", "#0b7285", "#c2255c", "#5c940d"];
  const base = document.body.dataset.base || "";

  // The token in ?token= has set the cookie the next requests carry: keep it out of the history.
  if (window.location.search.includes("token=")) {
    window.history.replaceState(null, "", window.location.pathname);
  }

  function el(name, attrs, text) {
    const node = name.startsWith("svg:") ? document.createElementNS(SVG, name.slice(4)) : document.createElement(name);
    Object.entries(attrs || {}).forEach(([key, value]) => node.setAttribute(key, value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // ---- figures table ---------------------------------------------------------------------------

  function pairs(cell, tier, section, names) {
    names.forEach((name) => {
      if (section[name] === undefined || section[name] === null) return;
      const pair = el("span", { class: "pair" }, name + "=");
      pair.appendChild(el("b", { "data-figure": tier + "." + name }, section[name]));
      cell.appendChild(pair);
    });
  }

  // The numbers in figures, each marked data-figure="prefix.name".
  function counterPairs(cell, prefix, figures) {
    Object.entries(figures).forEach(([name, value]) => {
      if (typeof value !== "number") return;
      const pair = el("span", { class: "pair" }, name + "=");
      pair.appendChild(el("b", { "data-figure": prefix + "." + name }, value));
      cell.appendChild(pair);
    });
  }

  function tierRow(body, tier, source, fill) {
    const row = el("tr");
    row.appendChild(el("td", {}, tier));
    row.appendChild(el("td", { class: "key" }, source));
    const cell = el("td");
    fill(cell);
    row.appendChild(cell);
    body.appendChild(row);
  }

  function errorText(cell, text) {
    cell.appendChild(el("span", { class: "error" }, text));
  }

  function countersRow(body, tier, counters) {
    if (counters) tierRow(body, tier, "host counters", (cell) => counterPairs(cell, tier + ".counters", counters));
  }

  function drawTiers(stats) {
    const body = document.querySelector("#tiers tbody");
    body.replaceChildren();
    const l1 = stats.l1;
    if (l1) {
      tierRow(body, "l1", l1.path, (cell) => {
        if (l1.error) return errorText(cell, l1.error);
        pairs(cell, "l1", l1, ["entries", "slots", "size", "shards", "segment_size", "max_value_size"]);
        const pair = el("span", { class: "pair" }, "fill=");
        pair.appendChild(el("b", { "data-figure": "l1.slot_fill_percent" }, (l1.slot_fill * 100).toFixed(2) + "%"));
        cell.appendChild(pair);
      });
      countersRow(body, "l1", l1.counters);
    }
    (stats.memcached || []).forEach((server, index) => {
      tierRow(body, "l2", server.server, (cell) => {
        if (server.state !== "up") errorText(cell, "unreachable: " + server.error);
        else pairs(cell, "l2." + index, server, ["curr_items", "bytes", "get_hits", "get_misses", "evictions", "curr_connections"]);
        // Since when a process of the host considers it down (its record in the L1 table).
        if (server.down_since) {
          errorText(cell, " down since " + server.down_since + " (marked by process " + server.down_marked_by + " on this host)");
        }
      });
    });
    countersRow(body, "l2", stats.memcached_counters);
    const sql = stats.sql;
    if (sql) {
      tierRow(body, "l3", sql.source, (cell) => {
        if (sql.error) return errorText(cell, sql.error);
        pairs(cell, "l3", sql, ["rows", "bytes", "tombstones", "log_rows", "log_head", "versions_rows"]);
      });
      countersRow(body, "l3", sql.counters);
    }
    const store = stats.store;
    if (store) {
      tierRow(body, "store", "all processes", (cell) => {
        counterPairs(cell, "store", store);
        Object.entries(store.operations || {}).forEach(([name, op]) => {
          const pair = el("span", { class: "pair" }, name + "=");
          pair.appendChild(el("b", { "data-figure": "store.operations." + name + ".count" }, op.count));
          cell.appendChild(pair);
        });
      });
    }
  }

  // ---- line charts -----------------------------------------------------------------------------

  const W = 400, H = 200, LEFT = 40, RIGHT = 118, TOP = 10, BOTTOM = 22;

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const step = Math.pow(10, Math.floor(Math.log10(value)));
    return [1, 2, 5, 10].map((m) => m * step).find((v) => v >= value);
  }

  function label(value) {
    return Math.abs(value) >= 1000 ? (value / 1000).toFixed(value % 1000 === 0 ? 0 : 1) + "k" : String(+value.toFixed(2));
  }

  // series: {name: [value or null, ...]} over times t (seconds). max: a fixed top (else scaled).
  function lineChart(svg, t, series, options) {
    svg.replaceChildren();
    const names = Object.keys(series).filter((name) => series[name].some((v) => v !== null));
    if (names.length === 0 || t.length < 2) {
      svg.appendChild(el("svg:text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "note" }, options.empty));
      return;
    }
    const all = names.flatMap((name) => series[name].filter((v) => v !== null));
    const top = options.max || niceMax(Math.max(...all));
    const t0 = t[0], span = Math.max(t[t.length - 1] - t0, 1);
    const x = (time) => LEFT + ((time - t0) / span) * (W - LEFT - RIGHT);
    const y = (value) => TOP + (1 - value / top) * (H - TOP - BOTTOM);

    [0, 0.5, 1].forEach((f) => {
      svg.appendChild(el("svg:line", { x1: LEFT, x2: W - RIGHT, y1: y(top * f), y2: y(top * f), class: "axis" }));
      svg.appendChild(el("svg:text", { x: LEFT - 6, y: y(top * f) + 4, "text-anchor": "end", class: "tick" },
        options.percent ? Math.round(f * 100) + "%" : label(top * f)));
    });
    svg.appendChild(el("svg:text", { x: LEFT, y: H - 6, class: "tick" }, "-" + Math.round(span) + " s"));
    svg.appendChild(el("svg:text", { x: W - RIGHT, y: H - 6, "text-anchor": "end", class: "tick" }, "now"));

    names.forEach((name, index) => {
      const color = COLORS[index % COLORS.length];
      let d = "", points = 0, gap = true;
      series[name].forEach((value, i) => {
        if (value === null) { gap = true; return; }
        d += (gap ? "M" : "L") + x(t[i]).toFixed(1) + " " + y(value).toFixed(1) + " ";
        gap = false;
        points += 1;
      });
      const path = el("svg:path", { d: d.trim(), class: "series", stroke: color, "data-series": name, "data-points": points });
      svg.appendChild(path);
      const latest = series[name].filter((v) => v !== null).pop();
      const legendY = TOP + 12 + index * 15;
      svg.appendChild(el("svg:rect", { x: W - RIGHT + 8, y: legendY - 8, width: 10, height: 3, fill: color }));
      svg.appendChild(el("svg:text", { x: W - RIGHT + 22, y: legendY, class: "legend", "data-latest": name },
        name + " " + (options.percent ? (latest * 100).toFixed(1) + "%" : label(latest))));
    });
  }

  // ---- sampled lists ---------------------------------------------------------------------------

  function topTable(id, rows, columns, empty) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    if (!rows || rows.length === 0) {
      const row = el("tr");
      row.appendChild(el("td", { colspan: columns.length + 1, class: "empty" }, empty));
      body.appendChild(row);
      return;
    }
    rows.forEach((entry) => {
      const row = el("tr");
      row.appendChild(el("td", { class: "key" }, entry[0]));
      columns.forEach((format, i) => row.appendChild(el("td", { class: "num" }, format(entry[i + 1]))));
      body.appendChild(row);
    });
  }

  function drawSamples(samples) {
    const note = document.getElementById("sampling");
    if (!samples) {
      note.textContent = "(no L1 table: nothing sampled)";
      return;
    }
    if (samples.error) {
      note.textContent = "(" + samples.error + ")";
      return;
    }
    const every = [...new Set(samples.processes.map((p) => p.every))].join(", ");
    note.textContent = samples.processes.length === 0
      ? "(no process publishes a sample)"
      : "(" + samples.processes.length + " process(es), 1 in " + every + " events)";
    const none = "nothing sampled yet";
    topTable("top-misses", samples.misses, [(n) => n], none);
    topTable("top-fill-time", samples.fill_time, [(us) => (us / 1000).toFixed(1), (n) => n], none);
    topTable("top-invalidations", samples.invalidations, [(n) => n], none);
  }

  // ---- VM watch --------------------------------------------------------------------------------

  // vmWatch: {reports: [...]}, newest first, or null where the dashboard runs outside the app.
  function drawVMWatch(vmWatch) {
    const body = document.querySelector("#vm-watch tbody");
    body.replaceChildren();
    const reports = vmWatch ? vmWatch.reports : [];
    if (reports.length === 0) {
      const row = el("tr");
      row.appendChild(el("td", { colspan: 4, class: "empty" }, vmWatch
        ? "no request has invalidated the VM caches (or Strata::VMWatch is not in the app's middleware)"
        : "the VM watch reports only to a dashboard mounted in the app, where Strata::VMWatch runs"));
      body.appendChild(row);
      return;
    }
    reports.forEach((report) => {
      const row = el("tr");
      row.appendChild(el("td", {}, report.time));
      row.appendChild(el("td", { class: "key" }, report.label));
      row.appendChild(el("td", {}, Object.entries(report.deltas).map(([name, growth]) => name + " +" + growth).join(", ")));
      const sites = el("td", { class: "key" });
      if (report.sites.length === 0) sites.appendChild(el("span", { class: "empty" }, report.debug ? "not attributed" : "debug: false"));
      report.sites.forEach((location) => sites.appendChild(el("div", {}, location)));
      row.appendChild(sites);
      body.appendChild(row);
    });
  }

  // ---- polling ---------------------------------------------------------------------------------

  // One line per tier's evictions, and one per tier's expired rows ("l3 expired").
  function evictionLines(s) {
    const lines = Object.assign({}, s.evictions);
    Object.entries(s.expired || {}).forEach(([tier, values]) => { lines[tier + " expired"] = values; });
    return lines;
  }

  function draw(data) {
    document.getElementById("time").textContent = data.time;
    drawTiers(data.stats);
    const s = data.series;
    lineChart(document.getElementById("chart-hit-ratio"), s.t, s.hit_ratio,
      { max: 1, percent: true, empty: "no hits or misses counted yet" });
    lineChart(document.getElementById("chart-latency"), s.t, s.latency,
      { empty: "no timed operations yet (host counters need an L1 table)" });
    lineChart(document.getElementById("chart-store"), s.t, s.store,
      { empty: "no fills or waits counted yet (host counters need an L1 table)" });
    lineChart(document.getElementById("chart-evictions"), s.t, evictionLines(s),
      { empty: "no evictions counted yet" });
    drawSamples(data.samples);
    drawVMWatch(data.vm_watch);
  }

  function poll() {
    const status = document.getElementById("status");
    // From the origin, not the page's URL: fetch refuses a URL with credentials in it (a page
    // opened as http://user:token@host/), and the browser sends its Basic ones by itself.
    fetch(location.origin + base + "/data.json", { credentials: "same-origin", cache: "no-store" })
      .then((response) => {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then((data) => {
        draw(data);
        status.textContent = "live";
        status.classList.remove("error");
      })
      .catch((error) => {
        status.textContent = "no data: " + error.message;
        status.classList.add("error");
      })
      .finally(() => window.setTimeout(poll, POLL_MS));
  }

  poll();
})();
