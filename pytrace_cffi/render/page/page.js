"use strict";
(function () {
  const ROW = 16, LANE_HEAD = 20, LANE_GAP = 6, AXIS = 24, MIN_SPAN_NS = 50, GROUP_HEAD = 24;
  const meta = JSON.parse(document.getElementById("pt-meta").textContent);
  const flat = JSON.parse(document.getElementById("pt-slices").textContent);
  // A reduced page (see write_html) has two more numbers per call: the calls left
  // out before it, and its self time over all its callees.
  const reduced = meta.reduced, STRIDE = reduced ? 6 : 4;
  const names = meta.names;
  const labels = names.map(shortName);
  const colors = names.map((name, key) => colorFor(name, meta.kinds[key]));
  const canvas = document.getElementById("canvas");
  const ctx = canvas.getContext("2d");
  const tooltip = document.getElementById("tooltip");

  // Python functions read "<path>(<line>): <function>"; the function says most.
  function shortName(name) {
    const match = /\(\d+\): (.*)$/.exec(name);
    return match ? match[1] : name;
  }
  function hash(text) {
    let h = 2166136261;
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
    return h >>> 0;
  }
  // Built-ins pale, Python functions brighter, record_function regions boldest.
  function colorFor(name, kind) {
    const hue = hash(name) % 360;
    if (kind === "c") return `hsl(${hue},30%,82%)`;
    return kind === "a" ? `hsl(${hue},85%,62%)` : `hsl(${hue},62%,74%)`;
  }
  const KIND_NAMES = { p: "Python", c: "built-in (C)", a: "record_function region" };

  // Rebuilds each thread's calls from the flat array; calls at one depth never
  // overlap, so per depth they are sorted by start and by end alike.
  function buildThread(info, data, firstId) {
    const n = data.length / STRIDE;
    const start = new Float64Array(n), end = new Float64Array(n);
    const key = new Int32Array(n), depth = new Int32Array(n), parent = new Int32Array(n);
    const id = new Float64Array(n), self = reduced ? new Float64Array(n) : null;
    const lastAtDepth = [], perDepth = [];
    let time = 0;                 // ns after the trace's start, exact in a double
    let index = -1;               // the call's index among all the thread's calls
    for (let i = 0, j = 0; i < n; i++, j += STRIDE) {
      time += data[j];
      index += reduced ? data[j + 4] + 1 : 1;
      id[i] = index;
      if (reduced) self[i] = data[j + 5];
      start[i] = time;
      end[i] = start[i] + data[j + 1];
      key[i] = data[j + 2];
      const d = depth[i] = data[j + 3];
      parent[i] = d > 0 ? lastAtDepth[d - 1] : -1;
      lastAtDepth[d] = i;
      (perDepth[d] || (perDepth[d] = [])).push(i);
    }
    const levels = [], levelEnds = [];
    for (let d = 0; d < perDepth.length; d++) {
      const level = Int32Array.from(perDepth[d] || []);
      levels.push(level);
      levelEnds.push(Float64Array.from(level, i => end[i]));
    }
    return { info, n, firstId, start, end, key, depth, parent, id, self, levels, levelEnds,
             top: 0, folded: false };
  }

  const threads = [];
  let callsBefore = 0, traceEnd = meta.stop_ns - meta.start_ns;
  meta.threads.forEach((info, t) => {
    const thread = buildThread(info, flat[t], callsBefore);
    callsBefore += info.calls;
    for (const ends of thread.levelEnds) traceEnd = Math.max(traceEnd, ends[ends.length - 1] || 0);
    threads.push(thread);
  });
  traceEnd = Math.max(traceEnd, 1);
  // Imports folded, pluggy hidden (views.js): rows, levels and the time warp;
  // view.start and view.end are display ns (views.toX of real ns).
  const views = ptViews({ meta, names, labels, threads, traceEnd, count, formatNs });
  let shownEnd = views.toX(traceEnd);
  const FOLD_COLOR = "hsl(210,13%,72%)";

  // A trace of several processes: the threads of a process form a group, headed
  // by the process's label, laid out in the order of meta.processes (a torchrun
  // job's ranks first); a process meant to start folded (the launcher's) does.
  const groups = [];
  if (meta.processes) {
    const groupOf = new Map(meta.processes.map(p => [p.pid, { process: p, top: 0, threads: [] }]));
    for (const thread of threads) {
      const pid = thread.info.pid;
      if (!groupOf.has(pid)) {
        groupOf.set(pid, { process: { pid, label: `pid ${pid}`, shown: `pid ${pid}`, calls: 0,
                                      threads: 0 }, top: 0, threads: [] });
      }
      groupOf.get(pid).threads.push(thread);
    }
    for (const group of groupOf.values()) {
      if (group.threads.length === 0) continue;
      for (const thread of group.threads) thread.folded = !!group.process.folded;
      groups.push(group);
    }
  }

  // A folded lane shows its header only.
  function rowsShown(thread) {
    return thread.folded ? 0 : thread.levels.length;
  }

  let contentHeight = AXIS;
  function layout() {
    contentHeight = AXIS;
    const place = thread => {
      thread.top = contentHeight;
      contentHeight += LANE_HEAD + rowsShown(thread) * ROW + LANE_GAP;
    };
    if (groups.length === 0) threads.forEach(place);
    for (const group of groups) {
      group.top = contentHeight;
      contentHeight += GROUP_HEAD;
      group.threads.forEach(place);
    }
  }
  layout();

  // The view it opens on (and Reset returns to): the whole trace, or in a job whose
  // launcher starts folded, the time of the lanes shown (a torchrun job's ranks).
  const home = { start: 0, end: shownEnd };
  if (groups.some(g => g.process.folded)) {
    let first = Infinity, last = -Infinity;
    for (const thread of threads) {
      if (thread.folded || thread.n === 0) continue;
      first = Math.min(first, thread.start[0]);
      for (const ends of thread.levelEnds) last = Math.max(last, ends[ends.length - 1] || 0);
    }
    if (first < last) {
      first = views.toX(first); last = views.toX(last);
      const pad = (last - first) * 0.02;
      home.start = Math.max(0, first - pad);
      home.end = Math.min(shownEnd, last + pad);
    }
  }
  const view = { start: home.start, end: home.end, scroll: 0 };
  let selected = null, highlightKeys = null, width = 0, height = 0;

  function lowerBound(sorted, value) {
    let lo = 0, hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid] < value) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  function count(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

  function formatNs(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (ns >= 1e3) return (ns / 1e3).toFixed(3) + " \u00b5s";
    return Math.round(ns) + " ns";
  }

  function resize() {
    const ratio = window.devicePixelRatio || 1;
    width = canvas.parentElement.clientWidth;
    height = Math.max(200, Math.min(contentHeight, Math.round(window.innerHeight * 0.6)));
    canvas.style.height = height + "px";
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    clampView();
    draw();
  }

  function clampView() {
    let span = Math.max(MIN_SPAN_NS, Math.min(view.end - view.start, shownEnd * 1.1));
    const slack = shownEnd * 0.05;
    view.start = Math.min(Math.max(view.start, -slack), shownEnd + slack - span);
    view.end = view.start + span;
    view.scroll = Math.min(Math.max(view.scroll, 0), Math.max(0, contentHeight - height));
  }

  function niceStep(ns) {
    const power = Math.pow(10, Math.floor(Math.log10(ns)));
    for (const m of [1, 2, 5]) if (m * power >= ns) return m * power;
    return 10 * power;
  }

  function drawAxis(nsPerPx) {
    const step = niceStep(nsPerPx * 110);
    const unit = step >= 1e8 ? [1e9, "s"] : step >= 1e5 ? [1e6, "ms"] :
      step >= 1e2 ? [1e3, "\u00b5s"] : [1, "ns"];
    const decimals = Math.max(0, -Math.floor(Math.log10(step / unit[0]) + 1e-9));
    ctx.fillStyle = "#f6f8fa";
    ctx.fillRect(0, 0, width, AXIS);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    // Ticks at real times; in folded imports' stretches a grey band instead.
    const bands = views.bands().filter(([a, b]) => b >= view.start && a <= view.end);
    for (const [a, b] of bands) {
      ctx.fillStyle = FOLD_COLOR;
      const x0 = (a - view.start) / nsPerPx, x1 = (b - view.start) / nsPerPx;
      ctx.fillRect(x0, 0, Math.max(1, x1 - x0), AXIS - 1);
    }
    let lastLabel = -Infinity;
    const last = views.fromX(view.end);
    for (let t = Math.ceil(views.fromX(view.start) / step) * step; t <= last; t += step) {
      const shown = views.toX(t);
      if (bands.some(([a, b]) => shown > a && shown < b)) {      // skip the fold
        t = Math.floor(views.fromX(bands.find(([a, b]) => shown > a && shown < b)[1]) / step) * step;
        continue;
      }
      const x = Math.round((shown - view.start) / nsPerPx) + 0.5;
      ctx.fillStyle = "rgba(208,215,222,0.6)";
      ctx.fillRect(x, AXIS, 1, height - AXIS);
      ctx.fillStyle = "#57606a";
      ctx.fillRect(x, AXIS - 6, 1, 6);
      if (x - lastLabel < 60) continue;
      ctx.fillText((t / unit[0]).toFixed(decimals) + " " + unit[1], x + 4, AXIS / 2);
      lastLabel = x;
    }
    ctx.fillStyle = "#d0d7de";
    ctx.fillRect(0, AXIS - 1, width, 1);
  }

  // One depth row of one thread. Calls under a pixel wide are merged: one mark per
  // pixel, then a binary search jumps past every call ending inside that pixel.
  function drawLevel(thread, d, y, nsPerPx, charWidth) {
    const level = thread.levels[d], ends = thread.levelEnds[d];
    const { start, end, key } = thread;
    const { toX, fromX } = views, last = fromX(view.end);
    let k = lowerBound(ends, fromX(view.start)), nextFreeX = -Infinity;
    while (k < level.length) {
      const i = level[k];
      if (start[i] > last) break;
      const x0 = (toX(start[i]) - view.start) / nsPerPx, x1 = (toX(end[i]) - view.start) / nsPerPx;
      const folded = views.isFolded(thread, i);
      const faded = highlightKeys !== null && !highlightKeys[key[i]];
      ctx.globalAlpha = faded ? 0.2 : 1;
      ctx.fillStyle = folded ? FOLD_COLOR : colors[key[i]];
      if (x1 - x0 < 1) {
        if (x0 >= nextFreeX) {
          ctx.fillRect(Math.floor(x0), y, 1, ROW - 1);
          nextFreeX = Math.floor(x0) + 1;
        }
        k = Math.max(k + 1, lowerBound(ends, fromX(view.start + nextFreeX * nsPerPx)));
        continue;
      }
      const left = Math.max(x0, -1), right = Math.min(x1, width + 1);
      ctx.fillRect(left, y, right - left - (x1 - x0 > 3 ? 1 : 0), ROW - 1);
      const room = right - left - 6;
      if (room > charWidth * 3) {
        let text = folded ? thread.rootAt.get(i).label : labels[key[i]];
        const fits = Math.floor(room / charWidth);
        if (text.length > fits) text = text.slice(0, fits - 1) + "\u2026";
        ctx.fillStyle = "#1f2328";
        ctx.fillText(text, left + 3, y + ROW / 2);
      }
      nextFreeX = x1;
      k++;
    }
    ctx.globalAlpha = 1;
  }

  function drawSelection(nsPerPx) {
    if (selected === null || selected.thread.folded) return;
    const { thread, index } = selected;
    if (thread.row[index] < 0) return;
    const x0 = (views.toX(thread.start[index]) - view.start) / nsPerPx;
    const x1 = (views.toX(thread.end[index]) - view.start) / nsPerPx;
    const y = thread.top + LANE_HEAD + thread.row[index] * ROW;
    ctx.strokeStyle = "#0969da";
    ctx.lineWidth = 2;
    ctx.strokeRect(Math.max(x0, -2), y, Math.max(2, Math.min(x1, width + 2) - Math.max(x0, -2)),
                   ROW - 1);
  }

  function draw() {
    const nsPerPx = (view.end - view.start) / width;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const charWidth = ctx.measureText("abcdefghijklmnopqrstuvwxyz_0123456789").width / 37;
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, AXIS, width, height - AXIS);
    ctx.clip();
    ctx.translate(0, -view.scroll);
    for (const group of groups) {
      if (group.top + GROUP_HEAD < view.scroll || group.top > view.scroll + height) continue;
      const p = group.process;
      ctx.fillStyle = "#d8dee4";
      ctx.fillRect(0, group.top, width, GROUP_HEAD);
      ctx.fillStyle = "#1f2328";
      ctx.font = "700 13px system-ui, sans-serif";
      const folded = group.threads.every(t => t.folded);
      ctx.fillText(`${folded ? "\u25b8" : "\u25be"} ${p.label}  \u00b7  ${p.shown}` +
                   `  \u00b7  ${count(p.threads, "thread")}` +
                   `  \u00b7  ${count(p.calls, "call")}`, 8, group.top + GROUP_HEAD / 2);
    }
    for (const thread of threads) {
      const laneBottom = thread.top + LANE_HEAD + rowsShown(thread) * ROW;
      if (laneBottom < view.scroll || thread.top > view.scroll + height) continue;
      ctx.fillStyle = "#eef1f4";
      ctx.fillRect(0, thread.top, width, LANE_HEAD);
      ctx.fillStyle = "#1f2328";
      ctx.font = "600 12px system-ui, sans-serif";
      const info = thread.info;
      ctx.fillText(`${thread.folded ? "\u25b8" : "\u25be"} ${info.name}  \u00b7  ` +
                   `tid ${info.tid}  \u00b7  ${count(info.calls, "call")}` +
                   (reduced ? ` (${thread.n} shown)` : ""), 8,
                   thread.top + LANE_HEAD / 2);
      ctx.font = "11px system-ui, sans-serif";
      for (let d = 0; d < rowsShown(thread); d++) {
        const y = thread.top + LANE_HEAD + d * ROW;
        if (y + ROW < view.scroll + AXIS || y > view.scroll + height) continue;
        drawLevel(thread, d, y, nsPerPx, charWidth);
      }
    }
    drawSelection(nsPerPx);
    ctx.restore();
    drawAxis(nsPerPx);
    if (contentHeight > height) {
      const barHeight = Math.max(20, (height - AXIS) * height / contentHeight);
      const barTop = AXIS + (height - AXIS - barHeight) * view.scroll / (contentHeight - height);
      ctx.fillStyle = "rgba(87,96,106,0.35)";
      ctx.fillRect(width - 6, barTop, 4, barHeight);
    }
  }

  let drawPending = false;
  function redraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; draw(); });
  }

  function laneHeaderAt(y) {
    const contentY = y + view.scroll;
    if (y < AXIS) return null;
    return threads.find(t => contentY >= t.top && contentY < t.top + LANE_HEAD) || null;
  }

  function processTitle(pid) {
    const found = (meta.processes || []).find(p => p.pid === pid);
    return found ? `${found.label} (${found.shown})` : `? (pid ${pid})`;
  }

  function groupHeaderAt(y) {
    const contentY = y + view.scroll;
    if (y < AXIS) return null;
    return groups.find(g => contentY >= g.top && contentY < g.top + GROUP_HEAD) || null;
  }

  function callAt(x, y) {
    if (y < AXIS) return null;
    const contentY = y + view.scroll, nsPerPx = (view.end - view.start) / width;
    for (const thread of threads) {
      const d = Math.floor((contentY - thread.top - LANE_HEAD) / ROW);
      if (d < 0 || d >= rowsShown(thread)) continue;
      const shown = view.start + x * nsPerPx;
      const k = lowerBound(thread.levelEnds[d], views.fromX(shown - 2 * nsPerPx));
      const index = thread.levels[d][k];
      if (k < thread.levels[d].length &&
          thread.start[index] <= views.fromX(shown + 2 * nsPerPx)) {
        return { thread, index };
      }
      return null;
    }
    return null;
  }

  function selfTime(thread, index) {
    if (reduced) return thread.self[index];
    let children = 0;
    for (let j = index + 1; j < thread.n && thread.depth[j] > thread.depth[index]; j++) {
      if (thread.parent[j] === index) children += thread.end[j] - thread.start[j];
    }
    return thread.end[index] - thread.start[index] - children;
  }

  function showDetails(hit) {
    const details = document.getElementById("details");
    details.textContent = "";
    if (hit === null) return;
    const { thread, index } = hit;
    const k = thread.key[index], parent = thread.parent[index];
    const rows = [
      ["Name", views.callName(thread, index)],
      ["Kind", KIND_NAMES[meta.kinds[k]]],
      ["Thread", `${thread.info.name} (tid ${thread.info.tid})`],
      ...(meta.processes ? [["Process", processTitle(thread.info.pid)]] : []),
      ["Start", formatNs(thread.start[index]) + " after trace start"],
      ["Duration", formatNs(thread.end[index] - thread.start[index])],
      ["Self time", formatNs(selfTime(thread, index))],
      ["Depth", String(thread.depth[index])],
      ["Python id", String(thread.firstId + thread.id[index])],
      ["Python parent id", parent < 0 ? "null" :
        `${thread.firstId + thread.id[parent]} (${labels[thread.key[parent]]})`],
      ["Python thread", String(thread.info.index)],
    ];
    if (thread.id[index] < thread.info.open_at_start) {
      rows.push(["Open at start", "running when tracing began: shown, not counted as a call"]);
    }
    for (const [arg, value] of Object.entries(meta.key_args[k] || {})) {
      rows.push([arg, typeof value === "string" ? value : JSON.stringify(value)]);
    }
    const table = document.createElement("table");
    for (const [label, value] of rows) {
      const tr = table.insertRow();
      tr.insertCell().textContent = label;
      tr.insertCell().textContent = value;
    }
    details.appendChild(table);
  }

  function zoomTo(hit) {
    const from = views.toX(hit.thread.start[hit.index]), to = views.toX(hit.thread.end[hit.index]);
    const pad = Math.max((to - from) * 0.1, MIN_SPAN_NS);
    view.start = from - pad;
    view.end = to + pad;
    clampView();
    redraw();
  }

  canvas.addEventListener("wheel", event => {
    event.preventDefault();
    const scale = event.deltaMode === 1 ? 16 : event.deltaMode === 2 ? height : 1;
    if (event.shiftKey) {
      view.scroll += (event.deltaY || event.deltaX) * scale;
    } else {
      const nsPerPx = (view.end - view.start) / width;
      const x = event.offsetX, anchor = view.start + x * nsPerPx;
      const span = Math.max(MIN_SPAN_NS, (view.end - view.start) *
                            Math.exp(event.deltaY * scale * 0.002));
      view.start = anchor - (x / width) * span + event.deltaX * scale * nsPerPx;
      view.end = view.start + span;
    }
    clampView();
    redraw();
  }, { passive: false });

  let drag = null;
  canvas.addEventListener("mousedown", event => {
    drag = { x: event.clientX, y: event.clientY, start: view.start, end: view.end,
             scroll: view.scroll, moved: false };
  });
  window.addEventListener("mousemove", event => {
    if (drag === null) return;
    const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true;
    canvas.classList.add("dragging");
    const shift = dx * (drag.end - drag.start) / width;
    view.start = drag.start - shift;
    view.end = drag.end - shift;
    view.scroll = drag.scroll - dy;
    clampView();
    redraw();
  });
  window.addEventListener("mouseup", event => {
    if (drag !== null && !drag.moved && event.target === canvas) {
      const group = groupHeaderAt(event.offsetY);
      if (group !== null) {          // a process's header folds (or unfolds) all its lanes
        const fold = group.threads.some(t => !t.folded);
        for (const t of group.threads) t.folded = fold;
        layout();
        resize();
        return;
      }
      const lane = laneHeaderAt(event.offsetY);
      if (lane !== null) {
        lane.folded = !lane.folded;
        layout();
        resize();
      } else {
        selected = callAt(event.offsetX, event.offsetY);
        if (selected !== null && views.isFolded(selected.thread, selected.index)) {
          views.unfold(selected.thread, selected.index);    // the block opens
          rewarp();
          zoomTo(selected);
        }
        showDetails(selected);
        redraw();
      }
    }
    drag = null;
    canvas.classList.remove("dragging");
  });
  canvas.addEventListener("dblclick", event => {
    const hit = callAt(event.offsetX, event.offsetY);
    if (hit !== null) zoomTo(hit);
  });
  canvas.addEventListener("mousemove", event => {
    const hit = drag === null ? callAt(event.offsetX, event.offsetY) : null;
    if (hit === null) { tooltip.style.display = "none"; return; }
    const duration = hit.thread.end[hit.index] - hit.thread.start[hit.index];
    tooltip.textContent = `${views.callName(hit.thread, hit.index)}  \u2014  ${formatNs(duration)}`;
    tooltip.style.display = "block";
    tooltip.style.left = Math.min(event.offsetX + 12, Math.max(0, width - 400)) + "px";
    tooltip.style.top = (event.offsetY + 16) + "px";
  });
  canvas.addEventListener("mouseleave", () => { tooltip.style.display = "none"; });
  document.getElementById("reset").addEventListener("click", () => {
    view.start = home.start; view.end = home.end; view.scroll = 0;
    clampView();
    redraw();
  });
  window.addEventListener("resize", resize);

  // The summary: rows [name, calls, total ns, self ns] computed when writing.
  let summaryRows = meta.summary.rows, summaryFunctions = meta.summary.functions;
  let summarySort = "total";
  // The import machinery's functions (render/page_stacks.py) can be one row, its
  // numbers those of the chosen process's (or all) taken as one function.
  const IMPORTS_ROW = "imports (the import machinery as one row)";
  const importNames = new Set(meta.imports ? meta.imports.keys.map(k => names[k]) : []);
  let importsRow = meta.imports ? meta.imports.row : null, importsFolded = false;
  // A pytest run with pluggy's plumbing hidden: its functions leave the table too.
  const pluggyNames = new Set(meta.tests ? meta.tests.pluggy.map(k => names[k]) : []);
  function rowsShownInSummary() {
    const shown = views.state.hidePluggy ? summaryRows.filter(row => !pluggyNames.has(row[0])) :
      summaryRows;
    if (!importsFolded || importsRow === null) return shown;
    const rows = shown.filter(row => !importNames.has(row[0]));
    if (importsRow[0] > 0 || importsRow[1] > 0) rows.push([IMPORTS_ROW, ...importsRow]);
    return rows;
  }
  const sortKeys = {
    name: (a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0,
    calls: (a, b) => b[1] - a[1] || sortKeys.name(a, b),
    total: (a, b) => b[2] - a[2] || sortKeys.name(a, b),
    self: (a, b) => b[3] - a[3] || sortKeys.name(a, b),
  };
  let highlightedName = null;

  function renderSummary(sort) {
    summarySort = sort;
    const rows = rowsShownInSummary().sort(sortKeys[sort]);
    for (const th of document.querySelectorAll("#summary th")) {
      th.classList.toggle("sorted", th.dataset.sort === sort);
    }
    const body = document.querySelector("#summary tbody");
    body.textContent = "";
    for (const [name, calls, total, self] of rows) {
      const tr = body.insertRow();
      tr.classList.toggle("highlighted", name === highlightedName);
      const cell = tr.insertCell();
      cell.textContent = name;
      cell.title = name;
      tr.insertCell().textContent = String(calls);
      tr.insertCell().textContent = (total / 1e6).toFixed(3);
      tr.insertCell().textContent = (self / 1e6).toFixed(3);
      tr.addEventListener("click", () => highlight(name === highlightedName ? null : name));
    }
  }

  function highlight(name) {
    highlightedName = name;
    highlightKeys = name === null ? null : name === IMPORTS_ROW ?
      Uint8Array.from(names, n => importNames.has(n) ? 1 : 0) :
      Uint8Array.from(names, n => n === name ? 1 : 0);
    for (const tr of document.querySelectorAll("#summary tbody tr")) {
      tr.classList.toggle("highlighted", tr.cells[0].textContent === name);
    }
    redraw();
    flameGraph.redraw();
  }

  for (const th of document.querySelectorAll("#summary th")) {
    th.addEventListener("click", () => renderSummary(th.dataset.sort));
  }
  function noteSummary() {
    const shown = summaryRows.length, functions = summaryFunctions;
    let text = (shown < functions ? `${shown} of ${count(functions, "function")}` :
      count(functions, "function")) +
      "; total counts recursion once, self excludes callees; click a row to highlight it";
    if (views.state.hidePluggy && pluggyNames.size) {
      text += `; pluggy's ${count(pluggyNames.size, "function")} hidden (untick ` +
        `"Hide pluggy's plumbing" to list them)`;
    }
    if (importsFolded) {
      text += `; "imports" is the import machinery (${count(importNames.size, "function")}: ` +
        "importlib's _find_and_load and its kin, __import__, and the built-ins only they " +
        "call) as one function: its total is the time spent importing, the imported " +
        "modules' own code included";
    }
    document.getElementById("summary-note").textContent = text;
  }
  noteSummary();
  const foldImports = document.getElementById("fold-imports");
  function labelFoldImports() {
    foldImports.textContent = importsFolded ? "Unfold imports" : "Fold imports into one row";
  }
  if (meta.imports) {
    foldImports.hidden = false;
    labelFoldImports();
    foldImports.addEventListener("click", () => {
      importsFolded = !importsFolded;
      if (!importsFolded && highlightedName === IMPORTS_ROW) highlight(null);
      labelFoldImports();
      noteSummary();
      renderSummary(summarySort);
    });
  }
  // A trace of several processes: the table covers all of them, the ranks (a
  // torchrun job's workers and their children: where it opens), or the one chosen.
  if (meta.processes) {
    const select = document.createElement("select");
    select.id = "summary-process";
    select.add(new Option("all processes", ""));
    if (meta.ranks) {
      const n = meta.ranks.processes;
      select.add(new Option(`the ranks (${n} process${n === 1 ? "" : "es"})`, "ranks"));
    }
    meta.processes.forEach((p, i) => select.add(new Option(`${p.label} (${p.shown})`,
                                                           String(i))));
    const chooseSummary = () => {
      const chosen = select.value === "" ? meta : select.value === "ranks" ? meta.ranks :
        meta.processes[+select.value];
      importsRow = chosen.imports === null ? null :
        Array.isArray(chosen.imports) ? chosen.imports : chosen.imports.row;
      summaryRows = chosen.summary.rows;
      summaryFunctions = chosen.summary.functions;
      noteSummary();
    };
    select.addEventListener("change", () => {
      chooseSummary();
      renderSummary(summarySort);
    });
    if (meta.ranks) {
      select.value = "ranks";
      chooseSummary();
    }
    const note = document.getElementById("summary-note");
    note.parentNode.insertBefore(select, note);
  }

  // The steps of several ranks (summary --steps): each rank's duration per step,
  // the slowest in bold; then the functions whose self time differs most between
  // each step's slowest rank and its median rank, summed over the steps.
  if (meta.steps) {
    const steps = meta.steps;
    const ms = ns => ns === null ? "-" : (ns / 1e6).toFixed(3);
    document.getElementById("steps-note").textContent =
      `ending at ${steps.rule}; ms`;
    const head = document.querySelector("#steps thead").insertRow();
    for (const title of ["Step", ...steps.columns, "Slowest", "Median"]) {
      const th = document.createElement("th");
      th.textContent = title;
      head.appendChild(th);
    }
    const body = document.querySelector("#steps tbody");
    for (const [step, durations, slowest, median] of steps.rows) {
      const tr = body.insertRow();
      tr.insertCell().textContent = String(step);
      durations.forEach((ns, column) => {
        const cell = tr.insertCell();
        cell.textContent = ms(ns);
        if (median !== null && column === slowest) cell.className = "slowest";
      });
      tr.insertCell().textContent = median === null ? "-" : steps.columns[slowest];
      tr.insertCell().textContent = median === null ? "-" : steps.columns[median];
    }
    document.getElementById("step-differences-note").textContent =
      `self time on the step threads, over ${count(steps.compared, "step")}; ` +
      "click a row to highlight it";
    const differences = document.querySelector("#step-differences tbody");
    for (const [name, slowestNs, medianNs] of steps.differences) {
      const tr = differences.insertRow();
      const cell = tr.insertCell();
      cell.textContent = name;
      cell.title = name;
      const difference = (slowestNs - medianNs) / 1e6;
      tr.insertCell().textContent = (difference >= 0 ? "+" : "") + difference.toFixed(3);
      tr.insertCell().textContent = ms(slowestNs);
      tr.insertCell().textContent = ms(medianNs);
      tr.addEventListener("click", () => highlight(name === highlightedName ? null : name));
    }
    // The rank that waits least in collectives, and its functions' self time
    // outside them against the other ranks' median (summary --steps says the same).
    const found = steps.stragglers;
    if (found && found.counted.length) {
      const title = steps.columns[found.straggler];
      const skipped = found.skipped.map(([step, why]) => `step ${step} (${why})`).join("; ");
      document.getElementById("straggler-note").textContent =
        `time outside collectives, over ${count(found.counted.length, "step")}` +
        (skipped ? `; skipped: ${skipped}` : "") + "; ms";
      document.getElementById("straggler-text").textContent =
        `${title}: ${ms(found.outside[found.straggler])} ms outside collectives against ` +
        `${ms(found.others)} ms for the median of the others: ` +
        (found.collectives ? "it waits least" : "its steps are longest");
      const rows = document.querySelector("#straggler tbody");
      for (const [name, mineNs, othersNs, caller] of found.differences) {
        const tr = rows.insertRow();
        const cell = tr.insertCell();
        cell.textContent = caller === null ? name : `${name} (called from ${caller})`;
        cell.title = cell.textContent;
        const difference = (mineNs - othersNs) / 1e6;
        tr.insertCell().textContent = (difference >= 0 ? "+" : "") + difference.toFixed(3);
        tr.insertCell().textContent = ms(mineNs);
        tr.insertCell().textContent = ms(othersNs);
        tr.addEventListener("click", () => highlight(name === highlightedName ? null : name));
      }
      document.getElementById("straggler-section").hidden = false;
    }
    document.getElementById("steps-panel").hidden = false;
  }

  document.getElementById("title").textContent = meta.title;
  document.getElementById("facts").textContent =
    `${count(meta.calls, "call")} on ${count(threads.length, "thread")}` +
    ` \u00b7 ${formatNs(meta.stop_ns - meta.start_ns)} \u00b7 ` +
    (meta.processes ? `${meta.processes.length} process` +
      `${meta.processes.length === 1 ? "" : "es"} (` +
      meta.processes.map(p => `${p.label}, ${p.shown}`).join("; ") + ")" : `pid ${meta.pid}`) +
    ` \u00b7 Python ${meta.python} (${meta.backend})`;
  if (meta.dropped_events > 0) {
    document.getElementById("warning").textContent =
      `${count(meta.dropped_events, "event")} dropped: parts of the trace are missing`;
  }
  const foldedAtStart = groups.filter(g => g.process.folded);
  if (foldedAtStart.length > 0) {
    const note = document.getElementById("order-note");
    note.textContent = "Ranks first. Folded: " +
      foldedAtStart.map(g => `${g.process.label} (${g.process.shown})`).join(", ") +
      ` (no rank: the launcher's) \u2014 click a process's header to unfold it.`;
    note.hidden = false;
  }
  if (reduced) {
    const notice = document.getElementById("notice");
    const levels = reduced.top_levels > 0 ?
      ` below the top ${count(reduced.top_levels, "level")}` : "";
    notice.textContent =
      `Reduced timeline: ${reduced.shown} of ${count(reduced.calls, "call")} shown. ` +
      `The ${reduced.calls - reduced.shown} left out lasted under ` +
      `${formatNs(reduced.min_ns)} each (under a pixel with the whole trace in view)` +
      `${levels}, and a page with all of them would be too big to stay quick ` +
      `(over ${reduced.budget} calls). The summary table counts every call. To see ` +
      `every call, write the trace as .pftrace (-o trace.pftrace with run or export, ` +
      `or Trace.export_perfetto) and open it in ui.perfetto.dev.`;
    notice.hidden = false;
  }
  // After folding or unfolding: the same real times in view, the lanes laid out.
  function rewarp() {
    const from = views.fromX(view.start), to = views.fromX(view.end);
    shownEnd = views.toX(traceEnd);
    home.start = 0; home.end = shownEnd;
    view.start = views.toX(from); view.end = views.toX(to);
    const note = document.getElementById("fold-note");
    note.textContent = views.note();
    note.hidden = note.textContent === "";
    layout();
    resize();
  }
  function option(id, on, change) {
    const box = document.getElementById(id);
    box.checked = on;
    box.parentElement.hidden = false;
    box.addEventListener("change", () => { change(box.checked); rewarp(); });
  }
  if (views.roots > 0) option("fold-timeline-imports", true, on => views.setFoldImports(on));
  if (views.state.hidePluggy) {
    option("hide-pluggy", true, on => {
      views.setHidePluggy(on);
      noteSummary();
      renderSummary(summarySort);
    });
  }
  // A pytest run's tests: a click zooms the timeline to the test and selects it.
  ptTestsTable({ meta, names, count, formatNs, open(t, index, start, end, key) {
    const thread = threads[t];
    if (key !== null) flameGraph.focusName(t, names[key]);     // every call, unreduced
    if (thread.folded) { thread.folded = false; layout(); resize(); }
    const found = lowerBound(thread.id, index);
    const hit = found < thread.n && thread.id[found] === index ? { thread, index: found } : null;
    if (hit !== null) { selected = hit; showDetails(hit); zoomTo(hit); }
    else {
      view.start = views.toX(start); view.end = views.toX(end);
      clampView();
    }
    view.scroll = Math.max(0, thread.top - AXIS);
    clampView();
    redraw();
  } });
  {
    const note = document.getElementById("fold-note");
    note.textContent = views.note();
    note.hidden = note.textContent === "";
  }
  const flameGraph = ptFlameGraph({ meta, names, labels, colors, formatNs, count,
                                    highlighted: () => highlightKeys });
  renderSummary("total");
  resize();
})();
