// Kafka Lite console: renders the page named by the URL path from the live snapshot (server-sent events).
"use strict";
(function () {
  const main = document.getElementById("main");
  const errorsBox = document.getElementById("errors");
  const live = document.getElementById("live");
  // Who is logged in, the CSRF token for changes, and whether this console makes changes at all (server-set).
  const consoleEl = document.getElementById("kl-console");
  const me = consoleEl ? JSON.parse(consoleEl.textContent) : {};
  const toLogin = () => location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
  let snap = null;
  let history = [];           // throughput and lag points, the last 15 minutes
  const HISTORY_S = 15 * 60;
  let pageErrors = [];        // one-line errors of the page's own requests
  const charts = [];
  const sortState = {};
  let msgCache = null;        // the records loaded on the Messages page

  const esc = (s) => String(s === null || s === undefined ? "" : s)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  const fmtBytes = (n) => n === null || n === undefined ? "–" :
    n < 1024 ? n + " B" : n < 1048576 ? (n / 1024).toFixed(1) + " KiB" :
    n < 1073741824 ? (n / 1048576).toFixed(1) + " MiB" : (n / 1073741824).toFixed(2) + " GiB";
  const fmtNum = (n) => n === null || n === undefined ? "–" : String(n);
  // Rates always carry their unit: "12.5 msgs/s", "3.4 KiB/s".
  const fmtCount = (n) => Number.isInteger(n) && n < 1e4 ? String(n) : n < 10 ? n.toFixed(1) : n < 1e4 ? Math.round(n).toString() :
    n < 1e6 ? (n / 1e3).toFixed(1) + "k" : (n / 1e6).toFixed(2) + "M";
  const fmtMsgRate = (n) => fmtCount(n || 0) + " msgs/s";
  const fmtByteRate = (n) => { n = n || 0; return (n < 1024 ? Math.round(n) + " B" : fmtBytes(n)) + "/s"; };
  // Internal topics (__consumer_offsets) are counted apart and listed on demand, on /cluster and /topics alike.
  let showInternal = localStorage.getItem("kl.showInternal") === "1";
  const shown = (topics) => topics.filter((t) => showInternal || !t.internal);
  const internalToggle = () => `<label class="toggle"><input type="checkbox" id="show-internal" ${showInternal ? "checked" : ""}> show internal topics</label>`;
  function bindInternalToggle() {
    const box = main.querySelector("#show-internal");
    if (box) box.addEventListener("change", () => {
      showInternal = box.checked;
      localStorage.setItem("kl.showInternal", showInternal ? "1" : "0");
      render(false);
    });
  }
  const fmtTime = (t) => new Date(t * 1000).toLocaleTimeString([], {hour12: false}) + "." +
    String(Math.floor((t * 1000) % 1000)).padStart(3, "0");
  const list = (a) => "[" + a.join(",") + "]";

  function route() {
    const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    return {page: parts[0] || "cluster", arg: parts[1]};
  }

  function showErrors() {
    const all = (snap ? snap.errors : []).concat(pageErrors);
    errorsBox.innerHTML = all.map((e) => `<div class="error">${esc(e)}</div>`).join("");
  }

  async function api(method, url, body) {
    try {
      const headers = {"Content-Type": "application/json"};
      if (method !== "GET" && me.csrf) headers["X-CSRF-Token"] = me.csrf;  // the console refuses changes without it
      const r = await fetch(url, {method, headers, body: body ? JSON.stringify(body) : undefined});
      if (r.status === 401 && me.login) { toLogin(); return null; }
      const data = await r.json();
      if (!r.ok) throw new Error(data.error || r.statusText);
      pageErrors = [];
      return data;
    } catch (e) {
      pageErrors = [String(e.message || e).split("\n")[0]];
      showErrors();
      return null;
    }
  }

  function sortable(id, rows, cols) {
    // cols: [{key, label, num, render}]; rows: objects. Click a header to sort.
    const st = sortState[id] || {key: cols[0].key, dir: 1};
    const sorted = rows.slice().sort((a, b) => {
      const x = a[st.key], y = b[st.key];
      return (x > y ? 1 : x < y ? -1 : 0) * st.dir;
    });
    const head = cols.map((c) => `<th data-sort="${c.key}" class="${c.num ? "num" : ""}">${esc(c.label)}` +
      (st.key === c.key ? (st.dir > 0 ? " ▲" : " ▼") : "") + "</th>").join("");
    return {head, rows: sorted, st};
  }

  function bindSort(table, id) {
    table.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => {
      const st = sortState[id] || {key: th.dataset.sort, dir: -1};
      sortState[id] = {key: th.dataset.sort, dir: st.key === th.dataset.sort ? -st.dir : 1};
      render(true);
    }));
  }

  // --- pages --------------------------------------------------------------------------------------

  function cluster() {
    const c = snap.counts;
    const ci = c.internal || {};
    const card = (label, v, bad) => `<div class="card ${bad ? "bad" : ""}"><span class="muted">${label}</span><b>${v}</b></div>`;
    // "6 (+50 internal)": the figure matches the table below; internal topics' share is shown beside it.
    const count = (id, key) => `<span id="${id}">${c[key]}</span>` +
      (ci[key] ? ` <small class="muted internal" id="${id}-internal">(+${ci[key]} internal)</small>` : "");
    let h = `<h2>Cluster <span class="muted">${esc(snap.cluster_id)}</span></h2><div class="cards">` +
      card("Controller", `<span id="controller">${snap.controller >= 0 ? "broker " + snap.controller : "none"}</span>`, snap.controller < 0) +
      card("Controller epoch", `<span id="controller-epoch">${snap.controller_epoch}</span>`) +
      card("Coordination", `<span id="coordination">${esc(snap.coordination)}</span>`) +
      card("Topics", count("count-topics", "topics")) +
      card("Partitions", count("count-partitions", "partitions")) +
      card("Under-replicated", count("count-urp", "under_replicated"), c.under_replicated + (ci.under_replicated || 0) > 0) +
      card("Offline", count("count-offline", "offline"), c.offline + (ci.offline || 0) > 0) + "</div>";
    h += `<h3>Brokers</h3><table id="brokers"><tr><th>Id</th><th>Address</th><th>Status</th><th>Rack</th><th>Version</th><th class="num">Leaders</th></tr>`;
    for (const b of snap.brokers) {
      h += `<tr data-broker="${b.id}" class="${b.up ? "" : "down"}"><td>${b.id}${b.id === snap.controller ? " (controller)" : ""}</td>` +
        `<td>${esc(b.address)}</td><td class="status"><span class="badge ${b.up ? "" : "down"}">${b.up ? "up" : "down"}</span></td>` +
        `<td>${esc(b.rack)}</td><td>${esc(b.version)}</td><td class="num leaders">${b.leaders}</td></tr>`;
    }
    h += `</table><h3>Partition leaders ${internalToggle()}</h3><table id="cluster-partitions"><tr><th>Topic</th><th>Partition</th><th>Leader</th><th>Replicas</th><th>ISR</th></tr>`;
    for (const t of shown(snap.topics)) {
      for (const p of t.partitions) {
        h += `<tr data-tp="${esc(t.name)}-${p.partition}" class="${p.under_replicated || p.leader < 0 ? "urp" : ""}">` +
          `<td>${esc(t.name)}</td><td>${p.partition}</td><td class="leader">${p.leader}</td>` +
          `<td class="replicas">${list(p.replicas)}</td><td class="isr">${list(p.isr)}</td></tr>`;
      }
    }
    h += `</table><h3>Timeline</h3><ul id="timeline">` + (snap.timeline.length ? snap.timeline.map((e) =>
      `<li class="${e.kind}"><span class="t">${fmtTime(e.t)}</span> <span class="k">${e.kind}</span> ${esc(e.text)}</li>`).join("")
      : `<li class="muted">no changes seen since the console started</li>`) + "</ul>";
    main.innerHTML = h;
    bindInternalToggle();
  }

  function topics() {
    const rates = (snap.point || {}).topics || {};  // over the watcher's sliding window (point.window_s)
    const rows = shown(snap.topics).map((t) => ({
      name: t.name, internal: t.internal, partitions: t.partitions.length, rf: t.replication_factor, size: t.size,
      records: t.records === undefined || t.internal ? null : t.records,  // internal topics' offsets are not listed
      urp: t.partitions.filter((p) => p.under_replicated).length,
      in: (rates[t.name] || {}).msgs_in || 0, bin: (rates[t.name] || {}).bytes_in || 0, out: (rates[t.name] || {}).bytes_out || 0}));
    const s = sortable("topics", rows, [
      {key: "name", label: "Topic"}, {key: "partitions", label: "Partitions", num: 1}, {key: "rf", label: "Replication", num: 1},
      {key: "size", label: "Size on disk", num: 1}, {key: "records", label: "Records", num: 1},
      {key: "in", label: "Messages in", num: 1}, {key: "bin", label: "Bytes in", num: 1}, {key: "out", label: "Bytes out", num: 1},
      {key: "urp", label: "Under-replicated", num: 1}]);
    // The create form is built once per visit and kept across live refreshes, so what the user is typing
    // survives; only the table is redrawn.
    if (!main.querySelector("#topics-head")) {
      main.innerHTML = `<h2>Topics</h2><form class="inline" id="topics-head">` + (me.writes
        ? `<span id="create-topic"><input name="name" placeholder="new topic" required>` +
          `<input name="partitions" type="number" min="1" value="3" class="w5" title="partitions">` +
          `<input name="replication_factor" type="number" min="1" value="${Math.min(3, snap.brokers.length) || 1}" class="w5" title="replication factor">` +
          `<button>Create</button></span> `
        : `<span id="read-only" class="muted read-only-note">read-only console</span> `) +
        `${internalToggle()}</form><div id="topics-count" class="muted"></div><table id="topics"></table>`;
      bindInternalToggle();
      if (me.writes) main.querySelector("#topics-head").addEventListener("submit", async (ev) => {
        ev.preventDefault();
        const f = new FormData(ev.target);
        const ok = await api("POST", "/api/topics", {name: f.get("name"), partitions: +f.get("partitions"),
                                                     replication_factor: +f.get("replication_factor")});
        if (ok) ev.target.reset();
      });
    }
    let h = `<tr>${s.head}<th></th></tr>`;
    for (const r of s.rows) {
      h += `<tr data-topic="${esc(r.name)}" class="${r.urp ? "urp" : ""}"><td><a href="/topics/${encodeURIComponent(r.name)}">${esc(r.name)}</a>` +
        `${r.internal ? ' <span class="badge internal">internal</span>' : ""}</td>` +
        `<td class="num">${r.partitions}</td><td class="num">${r.rf}</td><td class="num">${fmtBytes(r.size)}</td>` +
        `<td class="num">${fmtNum(r.records)}</td><td class="num msgs-in">${fmtMsgRate(r.in)}</td><td class="num bytes-in">${fmtByteRate(r.bin)}</td>` +
        `<td class="num bytes-out">${fmtByteRate(r.out)}</td><td class="num">${r.urp}</td>` +
        `<td>${r.internal || !me.writes ? "" : `<button data-delete="${esc(r.name)}">Delete</button>`}</td></tr>`;
    }
    const c = snap.counts, ci = c.internal || {};
    const n = (k, what) => `${k} ${what}${k === 1 ? "" : "s"}`;
    main.querySelector("#topics-count").textContent = `${n(c.topics, "topic")}, ${n(c.partitions, "partition")}` +
      (ci.topics ? ` (+${ci.topics} internal, ${n(ci.partitions, "partition")})` : "") +
      `; rates over the last ${(snap.point || {}).window_s || "–"} s`;
    const table = main.querySelector("#topics");
    table.innerHTML = h;
    bindSort(table, "topics");
    table.querySelectorAll("button[data-delete]").forEach((b) => b.addEventListener("click", async () => {
      if (confirm(`Delete topic ${b.dataset.delete}?`)) await api("DELETE", "/api/topics/" + encodeURIComponent(b.dataset.delete));
    }));
  }

  let configsFor = null;
  function topic(name) {
    const t = snap.topics.find((t) => t.name === name);
    if (!t) { main.innerHTML = `<h2>Topic ${esc(name)}</h2><p class="bad">unknown topic ${esc(name)}</p>`; return; }
    let h = `<h2>Topic <span id="topic-name">${esc(name)}</span></h2><table id="partitions"><tr><th>Partition</th><th>Leader</th>` +
      `<th>Replicas</th><th>ISR</th><th class="num">Log start</th><th class="num">High watermark</th><th class="num">Log end</th><th class="num">Size</th></tr>`;
    for (const p of t.partitions) {
      h += `<tr data-partition="${p.partition}" class="${p.under_replicated || p.leader < 0 ? "urp" : ""}"><td>${p.partition}</td>` +
        `<td class="leader">${p.leader}</td><td class="replicas">${list(p.replicas)}</td><td class="isr">${list(p.isr)}</td>` +
        `<td class="num">${fmtNum(p.log_start)}</td><td class="num hw">${fmtNum(p.high_watermark)}</td>` +
        `<td class="num">${fmtNum(p.log_end)}</td><td class="num">${fmtBytes(p.size)}</td></tr>`;
    }
    h += `</table><h3>Configs</h3><table id="configs"><tr><th>Key</th><th>Value</th></tr></table>`;
    const old = main.querySelector("#configs");
    main.innerHTML = h;
    if (old && configsFor === name) main.querySelector("#configs").replaceWith(old);
    else {
      configsFor = name;
      api("GET", `/api/topics/${encodeURIComponent(name)}/configs`).then((c) => {
        const tbl = main.querySelector("#configs");
        if (!c || !tbl) return;
        tbl.innerHTML = "<tr><th>Key</th><th>Value</th></tr>" + Object.entries(c).map(([k, v]) =>
          `<tr class="${v.default ? "muted" : ""}"><td>${esc(k)}</td><td>${esc(v.value)}${v.default ? "" : " (set)"}</td></tr>`).join("");
      });
    }
  }

  function messages(first) {
    if (!first && main.querySelector("#msg-form")) return;  // keep the user's form and results
    const q = new URLSearchParams(location.search);
    const names = snap.topics.filter((t) => !t.internal).map((t) => t.name);
    const sel = q.get("topic") || names[0] || "";
    let h = `<h2>Messages</h2><form class="inline" id="msg-form"><select name="topic">` +
      names.map((n) => `<option ${n === sel ? "selected" : ""}>${esc(n)}</option>`).join("") +
      `</select> partition <select name="partition">${partitionOptions(sel, q.get("partition") || "all")}</select>` +
      `<select name="mode">` + ["newest", "beginning", "offset", "timestamp"].map((m) =>
        `<option ${m === (q.get("mode") || "newest") ? "selected" : ""}>${m}</option>`).join("") + `</select>` +
      `<input name="offset" placeholder="offset" class="w7" value="${esc(q.get("offset") || "")}">` +
      `<input name="timestamp" placeholder="time (ISO or ms)" class="w12" value="${esc(q.get("timestamp") || "")}">` +
      `<input name="limit" type="number" min="1" max="500" value="${esc(q.get("limit") || 50)}" class="w5">` +
      `<button>Load</button> <input id="search" placeholder="search loaded records"></form>` +
      `<div id="msg-info" class="muted"></div><table id="messages"></table>`;
    main.innerHTML = h;
    const form = main.querySelector("#msg-form");
    form.addEventListener("submit", (ev) => { ev.preventDefault(); loadMessages(form); });
    // Another topic, or another partition of it: load at once (the partition filter is a filter).
    form.elements.topic.addEventListener("change", () => {
      form.elements.partition.innerHTML = partitionOptions(form.elements.topic.value, "all");
      loadMessages(form);
    });
    form.elements.partition.addEventListener("change", () => loadMessages(form));
    main.querySelector("#search").addEventListener("input", renderMessages);
    if (sel) loadMessages(form);
  }

  function partitionOptions(topicName, selected) {
    const t = snap.topics.find((t) => t.name === topicName);
    const numbers = t ? t.partitions.map((p) => String(p.partition)) : [];
    if (selected !== "all" && !numbers.includes(selected)) numbers.push(selected);  // as asked, even if unknown
    return ["all"].concat(numbers).map((n) => `<option value="${esc(n)}" ${n === selected ? "selected" : ""}>` +
      `${n === "all" ? "all partitions" : esc(n)}</option>`).join("");
  }

  async function loadMessages(form) {
    const f = new FormData(form);
    const p = new URLSearchParams({topic: f.get("topic"), partition: f.get("partition"), mode: f.get("mode"), limit: f.get("limit")});
    if (f.get("offset")) p.set("offset", f.get("offset"));
    if (f.get("timestamp")) {
      const ts = /^\d+$/.test(f.get("timestamp")) ? +f.get("timestamp") : Date.parse(f.get("timestamp"));
      if (!isNaN(ts)) p.set("timestamp", ts);
    }
    window.history.replaceState(null, "", "/messages?" + p.toString());
    const data = await api("GET", "/api/messages?" + p.toString());
    if (!data) return;
    msgCache = data;
    showErrors();
    renderMessages();
  }

  function renderMessages() {
    const tbl = main.querySelector("#messages");
    if (!tbl || !msgCache) return;
    const needle = (main.querySelector("#search").value || "").toLowerCase();
    const recs = msgCache.records.filter((r) => !needle || (r.key.text + "\n" + r.value.text + "\n" +
      r.headers.map((h) => h.join("=")).join("\n")).toLowerCase().includes(needle));
    const where = msgCache.partition === null
      ? `${msgCache.topic}, all ${msgCache.partitions.length} partitions (by time): high watermarks ` +
        msgCache.partitions.map((p) => `${p.partition}:${p.high_watermark}`).join(" ")
      : `${msgCache.topic}-${msgCache.partition}: log start ${msgCache.log_start}, high watermark ${msgCache.high_watermark}`;
    main.querySelector("#msg-info").textContent = `${where}; ${msgCache.records.length} loaded, ${recs.length} shown`;
    tbl.innerHTML = `<tr><th class="num">Partition</th><th class="num">Offset</th><th>Timestamp</th><th>Key</th><th>Value</th><th>Headers</th></tr>` +
      recs.map((r) => `<tr data-partition="${r.partition}" data-offset="${r.offset}"><td class="num partition">${r.partition}</td><td class="num">${r.offset}</td>` +
        `<td>${esc(new Date(r.timestamp).toISOString())}</td><td class="key"><pre>${esc(r.key.text)}</pre></td>` +
        `<td class="value" data-kind="${r.value.kind}"><pre>${esc(r.value.text)}</pre></td>` +
        `<td>${r.headers.map((h) => esc(h[0]) + "=" + esc(h[1])).join("<br>")}</td></tr>`).join("");
  }

  function groups() {
    const rows = snap.groups.map((g) => ({id: g.group_id, state: g.state, protocol: g.protocol || "", members: g.members.length,
      lag: g.total_lag === null || g.total_lag === undefined ? -1 : g.total_lag}));
    const s = sortable("groups", rows, [{key: "id", label: "Group"}, {key: "state", label: "State"},
      {key: "protocol", label: "Protocol"}, {key: "members", label: "Members", num: 1}, {key: "lag", label: "Total lag", num: 1}]);
    let h = `<h2>Consumer groups</h2><table id="groups"><tr>${s.head}</tr>`;
    for (const r of s.rows) {
      h += `<tr data-group="${esc(r.id)}"><td><a href="/groups/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td><td>${esc(r.state)}</td>` +
        `<td>${esc(r.protocol)}</td><td class="num">${r.members}</td><td class="num lag">${r.lag < 0 ? "–" : r.lag}</td></tr>`;
    }
    main.innerHTML = h + "</table>" + (rows.length ? "" : `<p class="muted">no consumer groups</p>`);
    bindSort(main.querySelector("#groups"), "groups");
  }

  function group(id, first) {
    const g = snap.groups.find((g) => g.group_id === id);
    if (!g) { main.innerHTML = `<h2>Group ${esc(id)}</h2><p class="bad">no group ${esc(id)} (yet)</p>`; return; }
    let h = `<h2>Group <span id="group-name">${esc(id)}</span></h2><div class="cards">` +
      `<div class="card"><span class="muted">State</span><b id="group-state">${esc(g.state)}</b></div>` +
      `<div class="card"><span class="muted">Protocol</span><b>${esc(g.protocol_type || "")} ${esc(g.protocol || "–")}</b></div>` +
      `<div class="card"><span class="muted">Total lag</span><b id="group-lag">${fmtNum(g.total_lag)}</b></div></div>` +
      `<h3>Members</h3><table id="members"><tr><th>Member</th><th>Client</th><th>Host</th><th>Assignment</th></tr>` +
      g.members.map((m) => `<tr><td>${esc(m.member_id)}</td><td>${esc(m.client_id)}</td><td>${esc(m.host)}</td><td>${esc(m.assignment.join(", "))}</td></tr>`).join("") +
      `</table><h3>Offsets</h3><table id="group-partitions"><tr><th>Topic</th><th>Partition</th><th class="num">Committed</th>` +
      `<th class="num">Log end</th><th class="num">Lag</th><th>Member</th></tr>` +
      g.partitions.map((p) => `<tr data-tp="${esc(p.topic)}-${p.partition}"><td>${esc(p.topic)}</td><td>${p.partition}</td>` +
        `<td class="num committed">${fmtNum(p.committed)}</td><td class="num log-end">${fmtNum(p.log_end)}</td>` +
        `<td class="num lag">${fmtNum(p.lag)}</td><td>${esc(p.member)}</td></tr>`).join("") +
      `</table><h3>Total lag over time</h3><div id="lag-chart" class="chart"></div>`;
    main.innerHTML = h;
    chart("#lag-chart", "lag (records)", [[id, (p) => (p.group_lag || {})[id]]], (v) => fmtCount(v));
  }

  function throughput() {
    const w = (snap.point || {}).window_s;
    main.innerHTML = `<h2>Throughput <span class="muted">(last 15 minutes; each point a rate over the ${w ? "last " + w + " s" : "window"})</span></h2><div class="charts">` +
      `<div><h3>Messages/s in, per broker</h3><div id="c-b-msgs" class="chart"></div></div>` +
      `<div><h3>Bytes/s in and out, per broker</h3><div id="c-b-bytes" class="chart"></div></div>` +
      `<div><h3>Messages/s in, per topic</h3><div id="c-t-msgs" class="chart"></div></div>` +
      `<div><h3>Bytes/s in and out, per topic</h3><div id="c-t-bytes" class="chart"></div></div></div>`;
    const brokers = snap.brokers.map((b) => String(b.id));
    const topicNames = snap.topics.filter((t) => !t.internal).map((t) => t.name);
    const get = (kind, scope, key) => (p) => ((p[scope] || {})[key] || {})[kind] || 0;
    chart("#c-b-msgs", "msgs/s", brokers.map((b) => ["broker " + b, get("msgs_in", "brokers", b)]), fmtMsgRate);
    chart("#c-b-bytes", "bytes/s", brokers.flatMap((b) => [["in " + b, get("bytes_in", "brokers", b)], ["out " + b, get("bytes_out", "brokers", b)]]), fmtByteRate);
    chart("#c-t-msgs", "msgs/s", topicNames.map((t) => [t, get("msgs_in", "topics", t)]), fmtMsgRate);
    chart("#c-t-bytes", "bytes/s", topicNames.flatMap((t) => [["in " + t, get("bytes_in", "topics", t)], ["out " + t, get("bytes_out", "topics", t)]]), fmtByteRate);
  }

  const COLORS = ["#1f6fd1", "#c0262d", "#2a9d47", "#8a4cc2", "#d98a00", "#0f9aa8", "#5a6578", "#d14f9e"];
  function chart(sel, label, lines, fmt) {
    const el = main.querySelector(sel);
    if (!el || typeof uPlot === "undefined") return;
    const xs = history.map((p) => p.t);
    const data = [xs].concat(lines.map(([, f]) => history.map((p) => { const v = f(p); return v === undefined ? null : v; })));
    const opts = {width: 520, height: 220, scales: {x: {time: true}},
      // The unit on the axis ticks and in the legend's values, not only in the title.
      series: [{}].concat(lines.map(([name], i) => ({label: name, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        value: (u, v) => v === null || v === undefined ? "–" : fmt(v)}))),
      axes: [{}, {label, size: 80, values: (u, ticks) => ticks.map(fmt)}]};
    charts.push(new uPlot(opts, data, el));
  }

  // --- rendering loop -----------------------------------------------------------------------------

  function render(first) {
    if (!snap || !snap.ready) { main.innerHTML = `<p class="muted">waiting for the cluster…</p>`; showErrors(); return; }
    const {page, arg} = route();
    document.querySelectorAll("header a").forEach((a) => a.classList.toggle("active", a.dataset.nav === page));
    while (charts.length) charts.pop().destroy();
    if (page === "cluster") cluster();
    else if (page === "topics" && arg) topic(arg);
    else if (page === "topics") topics();
    else if (page === "messages") messages(first);
    else if (page === "groups" && arg) group(arg, first);
    else if (page === "groups") groups();
    else if (page === "throughput") throughput();
    else main.innerHTML = `<p>no page ${esc(page)}</p>`;
    showErrors();
  }

  function addPoint(s) {
    if (s.point && (!history.length || history[history.length - 1].t < s.point.t)) {
      history.push(s.point);
      const cutoff = s.point.t - HISTORY_S;
      while (history.length && history[0].t < cutoff) history.shift();
    }
  }

  function onSnapshot(s) {
    snap = s;
    addPoint(s);
    live.textContent = "live · " + fmtTime(s.time || Date.now() / 1000);
    render(false);
  }

  function connect() {
    const es = new EventSource("/api/events");
    es.onmessage = (ev) => onSnapshot(JSON.parse(ev.data));
    es.onerror = () => {
      live.textContent = "reconnecting…" + (snap && snap.ready ? " · data of " + fmtTime(snap.time) : "");
      // The stream ends with the session (idle timeout, logout elsewhere): back to the login then.
      if (me.login) fetch("/api/session").then((r) => { if (r.status === 401) { es.close(); toLogin(); } }).catch(() => {});
    };
  }

  function showUser() {
    if (!me.login || !me.user) return;
    const who = document.getElementById("who");
    who.innerHTML = `<span id="user-name">${esc(me.user)}</span><button id="logout">Log out</button>`;
    who.querySelector("#logout").addEventListener("click", async () => {
      if (await api("POST", "/api/logout", {})) location.assign("/login");
    });
  }

  // First paint from the snapshot the server put in the page: no wait for the event stream or any fetch.
  const embedded = document.getElementById("kl-snapshot");
  if (embedded) {
    snap = JSON.parse(embedded.textContent);
    addPoint(snap);
    if (snap.ready) live.textContent = "snapshot · " + fmtTime(snap.time);
  }
  showUser();
  render(true);
  connect();
  // The charts' past, merged with whatever the stream has brought meanwhile.
  fetch("/api/history").then((r) => r.json()).then((h) => {
    const last = h.length ? h[h.length - 1].t : -Infinity;
    history = h.concat(history.filter((p) => p.t > last));
    if (snap && snap.ready && (route().page === "throughput" || route().page === "groups")) render(false);
  }).catch(() => {});
})();
