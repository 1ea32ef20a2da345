// A piece's diagram: an SVG drawn from the graph the API gives (`GET /api/v1/pieces/{name}/graph`,
// or a valid piece's validation). Layered top to bottom: a movement's row is its distance from
// the initial movement (breadth first); a parallel movement holds its sub-movements side by side;
// the special targets (COMPLETE, ABORT, ASK, WAIT_SUBTASKS) are dashed nodes in the last row.
// Edges that go down are curves; edges that go back up run in lanes on the right. The drawing
// scales to its box (viewBox), so it fits a phone.
import { h, svg } from "/ui/lib.js";

const SPECIAL = ["COMPLETE", "ABORT", "ASK", "WAIT_SUBTASKS"];
const CHAR = 7.4; // px per character at the nodes' font size (an estimate: no layout pass)
const LABEL_CHAR = 6.2;
const NODE_H = 34;
const PAD = 10; // inside a parallel movement
const HEAD = 24; // a parallel movement's title row
const GAP_X = 28;
const GAP_Y = 76;
const MARGIN = 16;
const LANE = 16;
const LABEL_MAX = 24;

/** `text` cut to `max` characters with an ellipsis. */
function cut(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function nodeWidth(name) {
  return Math.max(84, Math.min(cut(name, 26).length * CHAR + 24, 220));
}

/** How each kind of edge is chosen, said in full. */
const KINDS = {
  rule: "",
  aggregate: "over the parallel sub-movements' outcomes",
  default_next: "default_next: when no rule decides",
  loop_monitor: "loop monitor's judge",
  complete_tool: "the complete tool, offered in every movement",
};

/** An edge's short label (drawn) and its full text (title, list). */
export function edgeText(edge) {
  let text = edge.label || (edge.kind === "default_next" ? "default_next" : edge.kind === "complete_tool" ? "complete" : edge.kind);
  const how = KINDS[edge.kind] ?? edge.kind;
  let full = edge.label && how ? `${edge.label} (${how})` : edge.label || how;
  if (edge.requires_user_input) {
    text = `asks, then ${text}`;
    full = `${full}; the run asks the user first`;
  }
  return { text, full };
}

/**
 * The layout: boxes for the top-level movements (a parallel one holding its sub-movements) and
 * the special targets, in rows by breadth-first depth from the initial movement.
 */
function layout(graph) {
  const top = graph.movements.filter((m) => !m.parent);
  const subsOf = new Map(top.map((m) => [m.name, graph.movements.filter((s) => s.parent === m.name)]));
  const specials = SPECIAL.filter((t) => graph.edges.some((e) => e.to === t));
  const boxes = new Map();
  for (const m of top) {
    const subs = subsOf.get(m.name);
    let w = nodeWidth(m.name);
    let hgt = NODE_H;
    if (subs.length) {
      const inner = subs.reduce((sum, s) => sum + nodeWidth(s.name), 0) + GAP_X / 2 * (subs.length - 1);
      w = Math.max(w, inner + 2 * PAD);
      hgt = HEAD + NODE_H + 2 * PAD;
    }
    boxes.set(m.name, { name: m.name, movement: m, subs, w, h: hgt, special: false });
  }
  for (const t of specials) boxes.set(t, { name: t, w: nodeWidth(t), h: NODE_H, special: true });

  // Rows: breadth-first depth from the initial movement; movements no edge reaches come after.
  const next = new Map();
  for (const e of graph.edges) {
    if (!boxes.has(e.from) || !boxes.has(e.to) || boxes.get(e.to).special) continue;
    if (!next.has(e.from)) next.set(e.from, []);
    next.get(e.from).push(e.to);
  }
  const depth = new Map();
  const queue = boxes.has(graph.initial_movement) ? [graph.initial_movement] : [];
  if (queue.length) depth.set(graph.initial_movement, 0);
  while (queue.length) {
    const at = queue.shift();
    for (const to of next.get(at) || []) {
      if (!depth.has(to)) {
        depth.set(to, depth.get(at) + 1);
        queue.push(to);
      }
    }
  }
  let deepest = Math.max(-1, ...depth.values());
  for (const m of top) {
    if (!depth.has(m.name)) depth.set(m.name, ++deepest);
  }
  for (const t of specials) depth.set(t, deepest + 1);
  const rows = [];
  for (const [name, d] of depth) {
    (rows[d] = rows[d] || []).push(boxes.get(name));
  }

  // Order each row by where the boxes leading to it sit (fewer crossings), then place it.
  const order = new Map([...boxes.keys()].map((name, i) => [name, i]));
  const into = new Map();
  for (const e of graph.edges) {
    if (!boxes.has(e.from) || !boxes.has(e.to) || e.from === e.to) continue;
    if (!into.has(e.to)) into.set(e.to, []);
    into.get(e.to).push(e.from);
  }
  let y = MARGIN + 18; // room for the start marker
  let width = 0;
  for (const [index, row] of rows.filter(Boolean).entries()) {
    for (const b of row) b.row = index;
    const centre = (b) => {
      const from = (into.get(b.name) || []).map((n) => boxes.get(n)).filter((p) => p.x !== undefined && p.y < y);
      return from.length ? from.reduce((s, p) => s + p.x + p.w / 2, 0) / from.length : null;
    };
    for (const b of row) b.key = centre(b);
    row.sort((a, b) => (a.key ?? Infinity) - (b.key ?? Infinity) || order.get(a.name) - order.get(b.name));
    const rowH = Math.max(...row.map((b) => b.h));
    let x = MARGIN;
    for (const b of row) {
      b.x = x;
      b.y = y + (rowH - b.h) / 2;
      x += b.w + GAP_X;
    }
    row.width = x - GAP_X - MARGIN;
    width = Math.max(width, row.width);
    y += rowH + GAP_Y;
  }
  // Centre the rows on the widest.
  for (const row of rows.filter(Boolean)) {
    const shift = (width - row.width) / 2;
    for (const b of row) b.x += shift;
  }
  return { boxes, rows: rows.filter(Boolean), width: width + 2 * MARGIN, height: y - GAP_Y + MARGIN };
}

function anchor(b, side) {
  switch (side) {
    case "top": return [b.x + b.w / 2, b.y];
    case "bottom": return [b.x + b.w / 2, b.y + b.h];
    default: return [b.x + b.w, b.y + b.h / 2];
  }
}

function labelEl(text, full, x, y) {
  const w = text.length * LABEL_CHAR + 8;
  return svg("g", { class: "elabel" },
    svg("title", {}, full),
    svg("rect", { x: x - w / 2, y: y - 9, width: w, height: 17, rx: 3 }),
    svg("text", { x, y: y + 4, "text-anchor": "middle" }, text),
  );
}

/** A box for one movement (or sub-movement, or special target). */
function nodeEl(name, x, y, w, hgt, attrs, onSelect, title) {
  const special = SPECIAL.includes(name) && attrs.special;
  const g = svg("g", {
    class: `node${special ? " special" : ""}${attrs.parallel ? " parallel" : ""}${attrs.sub ? " sub" : ""}${attrs.initial ? " initial" : ""}`,
    "data-movement": special ? null : name,
    "data-target": special ? name : null,
    "data-parent": attrs.parent || null,
    tabindex: special || !onSelect ? null : "0",
    role: special || !onSelect ? null : "button",
    "aria-label": special ? `${name} (ends or pauses the run)` : `${title}: show its prompts`,
  },
  svg("title", {}, title),
  svg("rect", { x, y, width: w, height: hgt, rx: special ? 17 : 6 }),
  svg("text", { x: x + w / 2, y: attrs.parallel ? y + 16 : y + hgt / 2 + 4, "text-anchor": "middle" }, cut(name, 26)),
  );
  if (!special && onSelect) {
    g.addEventListener("click", (event) => {
      event.stopPropagation();
      onSelect(name);
    });
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        onSelect(name);
      }
    });
  }
  return g;
}

/**
 * Draws `graph` into `container` (replacing what was there). `onSelect(movement)` is called
 * when a movement's box is clicked (or chosen with Enter).
 */
export function drawDiagram(container, graph, onSelect) {
  const { boxes, width, height } = layout(graph);
  // One drawn edge per pair of boxes; its label is the first rule's, its title every rule's.
  const pairs = new Map();
  for (const e of graph.edges) {
    if (!boxes.has(e.from) || !boxes.has(e.to)) continue;
    const key = `${e.from}\u0000${e.to}`;
    if (!pairs.has(key)) pairs.set(key, []);
    pairs.get(key).push(e);
  }
  const drawn = [...pairs.values()].map((list) => {
    const from = boxes.get(list[0].from);
    const to = boxes.get(list[0].to);
    const texts = list.map(edgeText);
    const more = list.length > 1 ? ` +${list.length - 1}` : "";
    const fallback = list.every((e) => e.kind === "default_next" || e.kind === "complete_tool");
    let route = "up";
    if (from === to) route = "self";
    else if (to.row === from.row + 1) route = "down";
    else if (to.row > from.row) route = "long";
    else if (to.row === from.row) route = "same";
    return {
      from, to, route, list,
      text: cut(texts[0].text, LABEL_MAX - more.length) + more,
      full: `${from.name} → ${to.name}: ${texts.map((t) => t.full).join("; ")}`,
      attrs: {
        class: `edge k-${list[0].kind}${fallback ? " fallback" : ""}`,
        "data-from": from.name,
        "data-to": to.name,
        "data-rules": String(list.length),
      },
    };
  });

  // Long edges down run in lanes on the left, edges back up in lanes on the right; shorter
  // spans nearer the boxes.
  const span = (e) => Math.abs(e.to.row - e.from.row);
  const longs = drawn.filter((e) => e.route === "long").sort((a, b) => span(a) - span(b));
  const ups = drawn.filter((e) => e.route === "up").sort((a, b) => span(a) - span(b));
  const left = longs.length ? longs.length * LANE + 8 : 0;
  for (const b of boxes.values()) b.x += left;
  const boxRight = width + left - MARGIN;

  // Ports: a box's edges down leave its bottom side spread out, ordered by where they go;
  // edges arrive on the top side likewise.
  // Ports: a box's edges down leave its bottom side spread out, ordered by where they go (long
  // ones, which turn left to their lane, first); edges arrive on the top side likewise.
  const where = (e, other) => (e.route === "long" ? -1e6 + e[other].x : e[other].x);
  const ports = (key, side, other) => {
    const by = new Map();
    for (const e of drawn.filter((d) => d.route === "down" || d.route === "long" || (key === "from" && d.route === "same"))) {
      const box = e[key];
      if (!by.has(box)) by.set(box, []);
      by.get(box).push(e);
    }
    for (const [box, list] of by) {
      list.sort((a, b) => where(a, other) - where(b, other));
      list.forEach((e, i) => {
        e[side] = box.x + (box.w * (i + 1)) / (list.length + 1);
      });
    }
  };
  ports("from", "x1", "to");
  ports("to", "x2", "from");

  const edges = [];
  const labels = [];
  const r = 8;
  let reach = 0; // the right end of the widest label
  let leftmost = 0; // the left end of the leftmost label, when it is left of the drawing
  const rowBottoms = [];
  for (const b of boxes.values()) rowBottoms[b.row] = Math.max(rowBottoms[b.row] || 0, b.y + b.h);
  // Labels go to the first of their candidate places that covers no box and no other label.
  const solid = [...boxes.values()].map((b) => ({ x: b.x, y: b.y, w: b.w, h: b.h }));
  const placed = [];
  const clear = (q) => !solid.concat(placed).some((o) =>
    q.x < o.x + o.w && o.x < q.x + q.w && q.y < o.y + o.h && o.y < q.y + q.h);
  const place = (text, candidates) => {
    const w = text.length * LABEL_CHAR + 8;
    const rect = ([x, y]) => ({ x: x - w / 2, y: y - 9, w, h: 17 });
    const spot = candidates.find((c) => clear(rect(c))) || candidates[0];
    placed.push(rect(spot));
    return spot;
  };
  const levels = (row) => [0, 1, 2, 3].map((k) => rowBottoms[row] + 14 + k * 17);
  for (const e of drawn) {
    let d;
    let lx;
    let ly;
    const half = (e.text.length * LABEL_CHAR) / 2;
    if (e.route === "self") {
      const [x, y] = anchor(e.from, "right");
      d = `M${x},${y - 8} C${x + 34},${y - 26} ${x + 34},${y + 26} ${x},${y + 8}`;
      [lx, ly] = place(e.text, [[x + 32 + half, y], [x + 32 + half, y - 18], [x + 32 + half, y + 18]]);
    } else if (e.route === "down") {
      const y1 = e.from.y + e.from.h;
      const y2 = e.to.y;
      const bend = Math.max(20, (y2 - y1) / 2);
      d = `M${e.x1},${y1} C${e.x1},${y1 + bend} ${e.x2},${y2 - bend} ${e.x2},${y2}`;
      // On the curve, at one of the heights of the gap below the row.
      const at = (y) => {
        const t = Math.min(1, Math.max(0, (y - y1) / Math.max(1, y2 - y1)));
        return [(1 - t) ** 3 * e.x1 + 3 * (1 - t) ** 2 * t * e.x1 + 3 * (1 - t) * t ** 2 * e.x2 + t ** 3 * e.x2, y];
      };
      [lx, ly] = place(e.text, levels(e.from.row).map(at));
    } else if (e.route === "same") {
      // Between boxes of one row: an arc through the gap below it, its label at the bottom.
      const y1 = e.from.y + e.from.h;
      const y2 = e.to.y + e.to.h;
      const x2 = e.to.x + e.to.w / 2 + (e.to.x > e.from.x ? -e.to.w / 4 : e.to.w / 4);
      [lx, ly] = place(e.text, levels(e.from.row).map((y) => [(e.x1 + x2) / 2, y]));
      const c = Math.max(y1, y2) + (ly - Math.max(y1, y2)) / 0.75;
      d = `M${e.x1},${y1} C${e.x1},${c} ${x2},${c} ${x2},${y2}`;
    } else if (e.route === "long") {
      // Down into the gap, left to a lane, down the lane, and into the target from above.
      const lane = left - 8 - (longs.indexOf(e) + 1) * LANE + MARGIN;
      const y1 = e.from.y + e.from.h;
      const nearX = Math.max(lane + half + 6, e.x1 - half - 10);
      [lx, ly] = place(e.text, levels(e.from.row).flatMap((y) => [[nearX, y], [(lane + e.x1) / 2, y]]));
      const yOut = ly;
      const yIn = e.to.y - 14 - (longs.indexOf(e) % 3) * 4;
      d = `M${e.x1},${y1} V${yOut - r} Q${e.x1},${yOut} ${e.x1 - r},${yOut} H${lane + r} ` +
        `Q${lane},${yOut} ${lane},${yOut + r} V${yIn - r} Q${lane},${yIn} ${lane + r},${yIn} ` +
        `H${e.x2 - r} Q${e.x2},${yIn} ${e.x2},${yIn + r} V${e.to.y}`;
    } else {
      // Up out of the source's top, right along the gap above its row to a lane, up the lane,
      // and into the target's right side.
      const i = ups.indexOf(e);
      const lane = boxRight + (i + 1) * LANE;
      const x1 = e.from.x + e.from.w - Math.min(14, e.from.w / 4);
      const y1 = e.from.y;
      const yUp = y1 - 8 - (i % 3) * 4;
      const [x2, y2] = anchor(e.to, "right");
      d = `M${x1},${y1} V${yUp + r / 2} Q${x1},${yUp} ${x1 + r / 2},${yUp} H${lane - r} ` +
        `Q${lane},${yUp} ${lane},${yUp - r} V${y2 + r} Q${lane},${y2} ${lane - r},${y2} H${x2}`;
      [lx, ly] = place(e.text, [
        [x1 + half + 8, yUp - 10], [lane - half - 4, yUp - 10], [lane - half - 4, (yUp + y2) / 2],
        [lane + half + 4, (yUp + y2) / 2], [x1 + half + 8, yUp - 27],
      ]);
    }
    edges.push(svg("g", { ...e.attrs, class: `${e.attrs.class} r-${e.route}` }, svg("title", {}, e.full),
      svg("path", { d, "marker-end": "url(#pd-arrow)" })));
    labels.push(labelEl(e.text, e.full, lx, ly));
    reach = Math.max(reach, lx + half + 8);
    leftmost = Math.min(leftmost, lx - half - 8);
  }
  const extra = left + (ups.length ? ups.length * LANE + 8 : 0);

  const nodes = [];
  for (const b of boxes.values()) {
    if (b.special) {
      nodes.push(nodeEl(b.name, b.x, b.y, b.w, b.h, { special: true }, onSelect, b.name));
      continue;
    }
    const m = b.movement;
    const kind = m.parallel ? "parallel movement" : "movement";
    const initial = m.name === graph.initial_movement;
    const g = nodeEl(m.name, b.x, b.y, b.w, b.h, { parallel: m.parallel, initial }, onSelect,
      `${initial ? "initial " : ""}${kind} ${m.name}${m.edit ? " (may edit files)" : ""}`);
    nodes.push(g);
    let x = b.x + PAD;
    for (const s of b.subs) {
      const w = nodeWidth(s.name);
      const outcomes = s.outcomes.length ? `; reports ${s.outcomes.join(", ")}` : "";
      nodes.push(nodeEl(s.name, x, b.y + HEAD + PAD, w, NODE_H, { sub: true, parent: m.name }, onSelect,
        `sub-movement ${s.name} of ${m.name}${outcomes}`));
      x += w + GAP_X / 2;
    }
  }

  const init = boxes.get(graph.initial_movement);
  const start = init
    ? svg("g", { class: "start", "aria-hidden": "true" },
      svg("circle", { cx: init.x + init.w / 2, cy: MARGIN, r: 5 }),
      svg("path", { d: `M${init.x + init.w / 2},${MARGIN + 5} V${init.y}`, "marker-end": "url(#pd-arrow)" }))
    : null;
  const total = Math.max(width + extra, reach + MARGIN / 2);
  const described = `${graph.name}: ${graph.movements.length} movement${graph.movements.length === 1 ? "" : "s"}, ` +
    `${graph.edges.length} transition${graph.edges.length === 1 ? "" : "s"}, starting at ${graph.initial_movement}`;
  const drawing = svg("svg", {
    viewBox: `${Math.floor(leftmost)} 0 ${Math.ceil(total - leftmost)} ${Math.ceil(height)}`,
    // Its natural size at most; CSS shrinks it to the box (a phone) keeping its proportions.
    width: Math.ceil(total - leftmost),
    height: Math.ceil(height),
    preserveAspectRatio: "xMidYMin meet",
    role: "group",
    "aria-label": `Diagram of ${described}`,
    class: "pd-svg",
  },
  svg("defs", {},
    svg("marker", { id: "pd-arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7",
      markerHeight: "7", orient: "auto-start-reverse", markerUnits: "strokeWidth" },
    svg("path", { d: "M0,0 L10,5 L0,10 z" }))),
  start,
  svg("g", { class: "edges" }, edges),
  svg("g", { class: "nodes" }, nodes),
  svg("g", { class: "labels", "aria-hidden": "true" }, labels),
  );
  // The same transitions as a table, for a screen reader and for long conditions.
  const rows = graph.edges.map((e) => {
    const t = edgeText(e);
    return h("tr", {},
      h("td", {}, e.from), h("td", {}, e.to), h("td", {}, t.full));
  });
  const list = h("details", { class: "pd-list" },
    h("summary", {}, `Transitions as a list (${graph.edges.length})`),
    h("div", { class: "table-wrap" },
      h("table", {},
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "From"), h("th", { scope: "col" }, "To"),
          h("th", { scope: "col" }, "When"))),
        h("tbody", {}, rows))),
  );
  container.replaceChildren(drawing, list);
  return drawing;
}
