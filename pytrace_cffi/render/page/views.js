"use strict";
// The timeline's views (page.js calls ptViews once its threads are built):
// imports folded, a pytest run's per-test list, pluggy's plumbing hidden.
//
// Imports folded: per thread, each outermost call of the import machinery (the
// keys of meta.imports: importlib's _find_and_load and its kin, __import__ and
// the built-ins only they call) is a root; a folded root is drawn as one block
// ("import json · 6 modules") and what it calls is not drawn. The time inside
// folded roots when no thread does anything else (a sweep over every thread's
// top-level calls) is squeezed, together, into FOLD_SHARE of the rest's width:
// the axis skips through it (a grey band on the axis). Nothing leaves the data:
// a click on a block unfolds it, "Fold imports" unfolds all; tooltips and
// details give real times.
//
// A call's row: its depth, less the hidden calls above it (pluggy's frames in a
// pytest run when hidden); a call inside a folded root or hidden has row -1 and
// is in no level.
function ptViews(env) {
  const { meta, names, labels, threads, traceEnd, count, formatNs } = env;
  const FOLD_SHARE = 0.1;
  const importKey = new Uint8Array(names.length);
  if (meta.imports) for (const k of meta.imports.keys) importKey[k] = 1;
  const pluggyKey = new Uint8Array(names.length);
  const tests = meta.tests || null;
  if (tests) for (const k of tests.pluggy) pluggyKey[k] = 1;
  const state = { foldImports: true, hidePluggy: tests !== null && tests.pluggy.length > 0 };

  // A module's name from its <module> frame's file: "json/__init__.py" -> json.
  function moduleName(name) {
    const path = name.replace(/\(\d+\): <module>$/, "");
    const parts = path.split(/[\\/]/);
    let base = parts.pop();
    if (base === "__init__.py" && parts.length) base = parts.pop();
    return base.replace(/\.py$/, "");
  }

  // The roots of each thread: its outermost import machinery calls.
  let rootCount = 0;
  for (const thread of threads) {
    const { n, key, depth, parent } = thread;
    const inside = new Uint8Array(n);   // 1: under a root
    thread.roots = [];
    thread.rootAt = new Map();
    for (let i = 0; i < n; i++) {
      const p = parent[i];
      inside[i] = p >= 0 && (inside[p] || thread.rootAt.has(p)) ? 1 : 0;
      if (!importKey[key[i]] || inside[i]) continue;
      let modules = 0, first = null;
      for (let j = i + 1; j < n && depth[j] > depth[i]; j++) {
        if (labels[key[j]] === "<module>") {
          modules++;
          if (first === null) first = names[key[j]];
        }
      }
      const root = { index: i, folded: true, modules,
                     label: first === null ? "import" : `import ${moduleName(first)}` +
                       (modules > 1 ? ` \u00b7 ${count(modules, "module")}` : "") };
      thread.roots.push(root);
      thread.rootAt.set(i, root);
      rootCount++;
    }
  }

  // The warp: real ns <-> display ns, squeezing the foldable stretches.
  let starts = [], ends = [], cut = [0], scale = 1, folded = 0, foldedBlocks = 0;
  function computeWarp() {
    const events = [];                  // [time, busy change, import change]
    foldedBlocks = 0;
    for (const thread of threads) {
      const level = thread.levelsByDepth0;
      for (let k = 0; k < level.length; k++) {
        const i = level[k];
        events.push([thread.start[i], 1, 0], [thread.end[i], -1, 0]);
      }
      if (!state.foldImports) continue;
      for (const root of thread.roots) {
        if (!root.folded) continue;
        foldedBlocks++;
        // inside one of its thread's top-level calls (or one itself): not busy
        const i = root.index;
        events.push([thread.start[i], -1, 1], [thread.end[i], 1, -1]);
      }
    }
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    starts = []; ends = [];
    let busy = 0, importing = 0, from = null;
    for (const [time, busyChange, importChange] of events) {
      busy += busyChange; importing += importChange;
      const foldable = importing > 0 && busy <= 0;
      if (foldable && from === null) from = time;
      if (!foldable && from !== null) {
        if (time > from) {
          if (ends.length && ends[ends.length - 1] >= from) ends[ends.length - 1] = time;
          else { starts.push(from); ends.push(time); }
        }
        from = null;
      }
    }
    folded = 0;
    for (let j = 0; j < starts.length; j++) folded += ends[j] - starts[j];
    const rest = traceEnd - folded;
    scale = folded > 0 && rest > 0 ? Math.min(1, FOLD_SHARE * rest / folded) : 1;
    cut = [0];
    for (let j = 0; j < starts.length; j++) cut.push(cut[j] + (ends[j] - starts[j]) * (1 - scale));
  }
  function lastAtOrBefore(sorted, value) {
    let lo = 0, hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid] <= value) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
  }
  function toX(t) {
    const j = lastAtOrBefore(starts, t);
    if (j < 0) return t;
    if (t < ends[j]) return t - cut[j] - (t - starts[j]) * (1 - scale);
    return t - cut[j + 1];
  }
  function fromX(d) {
    let lo = 0, hi = starts.length;     // the last stretch starting at or before d
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid] - cut[mid] <= d) lo = mid + 1; else hi = mid;
    }
    const j = lo - 1;
    if (j < 0) return d;
    const shownStart = starts[j] - cut[j], shownEnd = shownStart + (ends[j] - starts[j]) * scale;
    if (d < shownEnd) return starts[j] + (d - shownStart) / scale;
    return d + cut[j + 1];
  }
  // The stretches squeezed, in display ns, for the axis's bands.
  function bands() {
    return starts.map((s, j) => [s - cut[j], s - cut[j] + (ends[j] - s) * scale]);
  }

  // A thread's rows and levels (calls per row, sorted by start and end alike).
  function relevel(thread) {
    const { n, key, parent } = thread;
    const row = thread.row = new Int32Array(n);
    const below = new Int32Array(n);    // the row of a call's visible children
    const perRow = [];
    for (let i = 0; i < n; i++) {
      const p = parent[i];
      const base = p < 0 ? 0 : below[p];
      const hiddenByFold = p >= 0 && (row[p] < 0 && below[p] < 0 ||
        state.foldImports && thread.rootAt.has(p) && thread.rootAt.get(p).folded);
      if (hiddenByFold) { row[i] = -1; below[i] = -1; continue; }
      const root = thread.rootAt.get(i);
      if (state.hidePluggy && pluggyKey[key[i]] && root === undefined) {
        row[i] = -1; below[i] = base;
        continue;
      }
      row[i] = base; below[i] = base + 1;
      (perRow[base] || (perRow[base] = [])).push(i);
    }
    thread.levels = [];
    thread.levelEnds = [];
    for (let d = 0; d < perRow.length; d++) {
      const level = Int32Array.from(perRow[d] || []);
      thread.levels.push(level);
      thread.levelEnds.push(Float64Array.from(level, i => thread.end[i]));
    }
  }

  function isFolded(thread, index) {
    if (!state.foldImports) return false;
    const root = thread.rootAt.get(index);
    return root !== undefined && root.folded;
  }
  function callName(thread, index) {
    return isFolded(thread, index) ? `${thread.rootAt.get(index).label} (folded: ` +
      `${names[thread.key[index]]}; click to unfold)` : names[thread.key[index]];
  }
  function note() {
    if (!state.foldImports) {
      return rootCount > 0 ?
        `${count(rootCount, "import")} shown whole (tick "Fold imports" to fold them).` : "";
    }
    if (foldedBlocks === 0) return "";
    if (scale === 1) {
      return `Imports folded: ${count(foldedBlocks, "block")}, each at its real width ` +
        `(${folded > 0 ? "already narrow" : "other threads ran meanwhile"}); click a ` +
        `block to unfold it, or untick "Fold imports". Nothing is left out.`;
    }
    const share = Math.round(100 * folded * scale / (traceEnd - folded + folded * scale));
    return `Imports folded: ${count(foldedBlocks, "block")}, ${formatNs(folded)} of ` +
      `importing shown in ${share}% of the width (the axis skips through the grey ` +
      `bands); click a block to unfold it, or untick "Fold imports". Nothing is left out.`;
  }

  for (const thread of threads) {
    thread.levelsByDepth0 = thread.levels.length ? thread.levels[0] : new Int32Array(0);
    relevel(thread);
  }
  computeWarp();

  return {
    state, toX, fromX, bands, isFolded, callName, note, relevel,
    roots: rootCount, tests,
    setFoldImports(on) {
      state.foldImports = on;
      for (const thread of threads) {
        for (const root of thread.roots) root.folded = true;
        relevel(thread);
      }
      computeWarp();
    },
    unfold(thread, index) {
      thread.rootAt.get(index).folded = false;
      relevel(thread);
      computeWarp();
    },
    setHidePluggy(on) {
      state.hidePluggy = on;
      threads.forEach(relevel);
    },
  };
}

// A pytest run's tests (meta.tests, render/page_tests.py): one row each, its
// function and file:line, its whole time and its test function's; a click
// shows the test's calls (env.open(thread, index, start, end, the function's key)).
function ptTestsTable(env) {
  const { meta, names, count, formatNs, open } = env;
  const tests = meta.tests;
  const section = document.getElementById("tests-section");
  if (!tests) return;
  section.hidden = false;
  const seen = new Map();
  const rows = tests.tests.map(([thread, index, start, end, key, testNs], order) => {
    let name = "(test function not found)", where = "";
    if (key !== null) {
      const match = /^(.*)\((\d+)\): (.*)$/.exec(names[key]);
      name = match ? match[3] : names[key];
      where = match ? `${match[1]}:${match[2]}` : "";
      const runs = (seen.get(key) || 0) + 1;
      seen.set(key, runs);
      if (runs > 1) name += ` [run ${runs}]`;
    }
    return { order, thread, index, start, end, key, name, where, testNs };
  });
  const body = document.querySelector("#tests tbody");
  let sort = "order";
  function render() {
    const sorted = rows.slice().sort(sort === "order" ? (a, b) => a.order - b.order :
      sort === "total" ? (a, b) => (b.end - b.start) - (a.end - a.start) :
        (a, b) => b.testNs - a.testNs);
    body.textContent = "";
    for (const test of sorted) {
      const tr = body.insertRow();
      const cell = tr.insertCell();
      cell.textContent = test.name;
      cell.title = `${test.name} ${test.where}`;
      tr.insertCell().textContent = test.where;
      tr.insertCell().textContent = formatNs(test.end - test.start);
      tr.insertCell().textContent = test.testNs ? formatNs(test.testNs) : "-";
      tr.addEventListener("click", () => {
        for (const other of body.rows) other.classList.toggle("highlighted", other === tr);
        open(test.thread, test.index, test.start, test.end, test.key);
      });
    }
  }
  for (const th of document.querySelectorAll("#tests th")) {
    th.addEventListener("click", () => { sort = th.dataset.sort; render(); });
  }
  document.getElementById("tests-note").textContent =
    `${count(rows.length, "test")}` + (tests.more ? ` (and ${tests.more} more not listed)` : "") +
    "; time: setup, call and teardown; function: the test function alone; click one to " +
    "see its calls in the timeline, and its function's subtree in the flame graph below";
  render();
}
