"use strict";
// The flame graph (an icicle: callers above callees) of one thread, or of a
// process's threads merged, from the distinct stacks render/page_stacks.py embeds
// (meta.flame: per thread, five numbers per stack in preorder: depth, key, calls,
// total ns, self ns). A frame is as wide as its total time. Clicking a frame
// focuses it: its subtree fills the width and its callers stay above it, full
// width; Back returns to the previous focus, the top row to the whole view.
// page.js calls ptFlameGraph once with what the two views share.
function ptFlameGraph(env) {
  const { meta, names, labels, colors, formatNs, count, highlighted } = env;
  const ROW = 16, MAX_ROWS = 40, ROOT_COLOR = "#d8dee4";
  const flame = meta.flame;
  const canvas = document.getElementById("flame-canvas");
  const ctx = canvas.getContext("2d");
  const tooltip = document.getElementById("flame-tooltip");
  const select = document.getElementById("flame-view");
  const back = document.getElementById("flame-back");
  const pathText = document.getElementById("flame-path");
  const note = document.getElementById("flame-note");

  // A view's tree in parallel arrays; node 0 stands for the view (its threads).
  // Threads merge stack by stack: a stack's key is the first key of its name.
  function buildView(threadNumbers, title) {
    const v = { title, key: [-1], calls: [0], total: [0], self: [0], parent: [-1], depth: [0],
                children: [[]], leftOut: 0, stacks: 0, shown: 0, maxDepth: 0 };
    const childByKey = [new Map()];
    for (const t of threadNumbers) {
      const data = flame.threads[t], nodes = data.nodes, path = [0];
      v.total[0] += data.total_ns;
      v.leftOut += data.left_out_ns;
      v.stacks += data.stacks;
      v.shown += data.shown;
      for (let j = 0; j < nodes.length; j += 5) {
        const d = nodes[j], k = nodes[j + 1], up = path[d];
        let node = childByKey[up].get(k);
        if (node === undefined) {
          node = v.key.length;
          v.key.push(k); v.calls.push(0); v.total.push(0); v.self.push(0);
          v.parent.push(up); v.depth.push(d + 1); v.children.push([]);
          childByKey.push(new Map());
          v.children[up].push(node);
          childByKey[up].set(k, node);
          v.maxDepth = Math.max(v.maxDepth, d + 1);
        }
        v.calls[node] += nodes[j + 2];
        v.total[node] += nodes[j + 3];
        v.self[node] += nodes[j + 4];
        path[d + 1] = node;
      }
    }
    const byTotal = (a, b) => v.total[b] - v.total[a] ||
      (labels[v.key[a]] < labels[v.key[b]] ? -1 : labels[v.key[a]] > labels[v.key[b]] ? 1 : 0);
    for (const kids of v.children) kids.sort(byTotal);
    return v;
  }

  // The views offered: per process (in the page's order) its threads merged when it
  // has several, then each thread. It opens on the busiest thread (the most calls
  // begun while tracing) of the first process not folded: rank 0's in a torchrun
  // job, the cell's in a notebook (whose other threads mostly wait).
  const choices = [];
  let firstChoice = 0;
  const threadTitle = t => `${meta.threads[t].name} (tid ${meta.threads[t].tid})`;
  const begun = t => meta.threads[t].calls - meta.threads[t].open_at_start;
  function offer(numbers, title, merged) {
    if (numbers.length > 1) choices.push({ text: merged, threads: numbers });
    const busiest = numbers.reduce((best, t) => begun(t) > begun(best) ? t : best, numbers[0]);
    numbers.forEach(t => {
      if (t === busiest) firstChoice = choices.length;
      choices.push({ text: title(t), threads: [t] });
    });
  }
  if (meta.processes) {
    let opened = false;
    for (const p of meta.processes) {
      const numbers = meta.threads.map((info, t) => info.pid === p.pid ? t : -1)
        .filter(t => t >= 0);
      if (numbers.length === 0) continue;
      const before = firstChoice;
      offer(numbers, t => `${p.label} (${p.shown}) \u00b7 ${threadTitle(t)}`,
            `${p.label} (${p.shown}): ${count(numbers.length, "thread")}`);
      if (opened || p.folded) firstChoice = before;
      else opened = true;
    }
  } else if (meta.threads.length > 0) {
    offer(meta.threads.map((_, t) => t), threadTitle,
          `all ${count(meta.threads.length, "thread")}`);
  }
  choices.forEach((choice, i) => select.add(new Option(choice.text, String(i))));

  let view = null, focus = 0, history = [], scroll = 0, width = 0, height = 0;

  function choose(i) {
    const choice = choices[i];
    if (choice === undefined) return;
    choice.view = choice.view || buildView(choice.threads, choice.text);
    view = choice.view;
    select.value = String(i);
    focus = 0;
    history = [];
    scroll = 0;
    describe();
    resize();
  }

  function describe() {
    const parts = [`${count(view.stacks, "distinct stack")}, every call counted ` +
                   "(the timeline's reduction does not apply here)"];
    if (flame.min_ppm > 0 || flame.max_depth !== null) {
      const rule = [];
      if (flame.min_ppm > 0) rule.push(`under ${flame.min_ppm / 1e4}% of their thread's time`);
      if (flame.max_depth !== null) rule.push(`deeper than ${flame.max_depth} calls`);
      parts.push(`to keep the page small, stacks ${rule.join(" or ")} are left out: ` +
                 `${view.stacks - view.shown} of these ${view.stacks}, ` +
                 `${formatNs(view.leftOut)} (still counted in their callers' total)`);
    }
    parts.push("click a frame to focus it, the top row or Back to go up");
    note.textContent = parts.join("; ");
  }

  function ancestors(node) {
    const chain = [];
    for (; node >= 0; node = view.parent[node]) chain.push(node);
    return chain.reverse();
  }

  function frameLabel(node) {
    return node === 0 ? view.title : labels[view.key[node]];
  }

  function showPath() {
    pathText.textContent = ancestors(focus).map(frameLabel).join(" \u203a ");
    back.disabled = history.length === 0;
  }

  function rows() {
    return view.depth[focus] + 1 + subtreeDepth(focus);
  }

  function subtreeDepth(node) {
    let deepest = 0;
    const pending = [[node, 0]];
    while (pending.length) {
      const [n, d] = pending.pop();
      deepest = Math.max(deepest, d);
      for (const child of view.children[n]) pending.push([child, d + 1]);
    }
    return deepest;
  }

  function resize() {
    const ratio = window.devicePixelRatio || 1;
    width = canvas.parentElement.clientWidth;
    height = Math.max(2, Math.min(rows(), MAX_ROWS)) * ROW;
    canvas.style.height = height + "px";
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    scroll = Math.min(scroll, Math.max(0, rows() * ROW - height));
    showPath();
    draw();
  }

  function drawFrame(node, x, w, row, faded, charWidth) {
    const y = row * ROW - scroll;
    if (y + ROW < 0 || y > height || w < 0.5) return;
    const keys = highlighted();
    ctx.globalAlpha = faded || (keys !== null && node > 0 && !keys[view.key[node]]) ? 0.35 : 1;
    ctx.fillStyle = node === 0 ? ROOT_COLOR : colors[view.key[node]];
    ctx.fillRect(x, y, Math.max(1, w - (w > 3 ? 1 : 0)), ROW - 1);
    ctx.globalAlpha = 1;
    const room = w - 6;
    if (room > charWidth * 3) {
      let text = frameLabel(node);
      const fits = Math.floor(room / charWidth);
      if (text.length > fits) text = text.slice(0, fits - 1) + "\u2026";
      ctx.fillStyle = "#1f2328";
      ctx.fillText(text, x + 3, y + ROW / 2);
    }
  }

  // Lays out the focused view: callers full width, the focus's subtree by total time.
  // visit(node, x, w, row, isCaller) for each frame wider than half a pixel.
  function walk(visit) {
    const chain = ancestors(focus);
    chain.forEach((node, row) => visit(node, 0, width, row, node !== focus));
    const scale = view.total[focus] > 0 ? width / view.total[focus] : 0;
    const pending = [[focus, 0, chain.length - 1]];
    while (pending.length) {
      const [node, x0, row] = pending.pop();
      let x = x0;
      for (const child of view.children[node]) {
        const w = view.total[child] * scale;
        if (w < 0.5) break;                  // sorted by total: the rest are narrower
        if (visit(child, x, w, row + 1, false) !== false) pending.push([child, x, row + 1]);
        x += w;
      }
    }
  }

  function draw() {
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const charWidth = ctx.measureText("abcdefghijklmnopqrstuvwxyz_0123456789").width / 37;
    walk((node, x, w, row, isCaller) => {
      drawFrame(node, x, w, row, isCaller, charWidth);
      return (row + 1) * ROW - scroll <= height;     // rows below the canvas: not drawn
    });
  }

  let drawPending = false;
  function redraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; draw(); });
  }

  function frameAt(x, y) {
    const row = Math.floor((y + scroll) / ROW);
    let found = null;
    walk((node, x0, w, r) => {
      if (r === row && x >= x0 && x < x0 + w) found = node;
      return r < row;
    });
    return found;
  }

  function percent(part, whole) {
    return whole > 0 ? ` (${(100 * part / whole).toFixed(1)}%)` : "";
  }

  canvas.addEventListener("mousemove", event => {
    const node = frameAt(event.offsetX, event.offsetY);
    if (node === null) { tooltip.style.display = "none"; return; }
    const shownBelow = view.children[node].reduce((sum, c) => sum + view.total[c], 0);
    const leftOut = view.total[node] - view.self[node] - shownBelow;
    tooltip.textContent = node === 0 ? `${view.title}: ${formatNs(view.total[0])}` :
      `${names[view.key[node]]}  \u2014  total ${formatNs(view.total[node])}` +
      `${percent(view.total[node], view.total[0])}, self ${formatNs(view.self[node])}, ` +
      `${count(view.calls[node], "call")}` +
      (leftOut > 0 ? `, ${formatNs(leftOut)} in callees left out` : "");
    tooltip.style.display = "block";
    tooltip.style.left = Math.min(event.offsetX + 12, Math.max(0, width - 400)) + "px";
    tooltip.style.top = (event.offsetY + 16) + "px";
  });
  canvas.addEventListener("mouseleave", () => { tooltip.style.display = "none"; });
  canvas.addEventListener("click", event => {
    const node = frameAt(event.offsetX, event.offsetY);
    if (node === null || node === focus) return;
    history.push(focus);
    focus = node;
    resize();
  });
  canvas.addEventListener("wheel", event => {
    const most = Math.max(0, rows() * ROW - height);
    if (most === 0) return;                  // all rows shown: the page scrolls
    event.preventDefault();
    const scale = event.deltaMode === 1 ? ROW : event.deltaMode === 2 ? height : 1;
    scroll = Math.min(Math.max(scroll + event.deltaY * scale, 0), most);
    redraw();
  }, { passive: false });
  back.addEventListener("click", () => {
    if (history.length === 0) return;
    focus = history.pop();
    resize();
  });
  select.addEventListener("change", () => choose(+select.value));
  window.addEventListener("resize", () => { if (view !== null) resize(); });

  if (choices.length === 0) {
    select.hidden = true;
    note.textContent = "No calls to show.";
  } else {
    choose(firstChoice);
  }
  // Opens thread t's own view focused on its busiest frame named `name` (a test's
  // function: its subtree, every call counted); false when it is not there.
  function focusName(t, name) {
    const i = choices.findIndex(choice => choice.threads.length === 1 && choice.threads[0] === t);
    if (i < 0) return false;
    choose(i);
    let best = -1;
    for (let node = 1; node < view.key.length; node++) {
      if (names[view.key[node]] === name && (best < 0 || view.total[node] > view.total[best])) {
        best = node;
      }
    }
    if (best < 0) return false;
    history.push(0);
    focus = best;
    resize();
    return true;
  }
  return { redraw, focusName };
}
