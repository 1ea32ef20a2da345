// `/pieces/{name}`: the piece editor. The YAML with line numbers, checked as you type
// (`POST /api/v1/pieces/validate`) with each error at its line; save (`PUT`) and delete for
// pieces in the store (a pieces directory's file is read-only here); the diagram of the piece as
// loaded; and `maestro prompt`'s exact prompts for any movement, one click away.
import { ApiError, api, fail, field, h, me, notify, start, withQuery } from "/ui/lib.js";
import { drawDiagram } from "/ui/diagram.js";

const DEBOUNCE_MS = 300;

/** The piece a new name starts from: valid, small, and showing the parts a piece has. */
function starter(name) {
  return `name: ${name}
description: What this piece is for, in one sentence (the classifier reads it).
max_movements: 10
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You are a careful engineer who plans before acting.
    instruction: |
      Read the task and write a short, numbered plan: {task}
    allowed_tools: [Glob, Grep, Read]
    rules:
      - condition: the plan is ready
        next: work
    default_next: ABORT
  - name: work
    edit: true
    persona: You carry out plans precisely.
    instruction: |
      Carry out the plan from the previous movement. When the task is done, call \`complete\`.
    allowed_tools: [Glob, Grep, Read, Write, Edit]
    rules: []
    default_next: ABORT
`;
}

function pieceName() {
  const raw = location.pathname.replace(/^\/pieces\//, "").replace(/\/$/, "");
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

const piecePath = (name) => `/api/v1/pieces/${encodeURIComponent(name)}`;

start(async () => {
  const app = document.getElementById("app");
  const name = pieceName();
  document.getElementById("title").textContent = `Piece ${name}`;
  document.title = `${name} · Pieces · Maestro`;

  let piece = null; // {name, yaml, origin} as saved; null while new
  try {
    piece = await api(piecePath(name));
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
  }
  let saved = piece ? piece.yaml : null;

  // --- The editor: a textarea and a gutter of line numbers that scrolls with it.
  const gutter = h("div", { id: "gutter", class: "pe-gutter", "aria-hidden": "true" });
  const yaml = h("textarea", {
    id: "yaml", name: "yaml", spellcheck: "false", autocapitalize: "off", autocomplete: "off",
    wrap: "off", "aria-describedby": "pe-summary",
  });
  yaml.value = piece ? piece.yaml : starter(name);
  const editor = h("div", { class: "pe-editor" }, gutter, yaml);
  const summary = h("p", { id: "pe-summary", class: "pe-summary", "aria-live": "polite" });
  const diagnostics = h("ul", { id: "diagnostics", class: "pe-diagnostics" });
  const dirty = h("span", { class: "pe-dirty muted", "aria-live": "polite" });
  const save = h("button", { type: "button", id: "save" }, "Save");
  const del = h("button", { type: "button", id: "delete", class: "danger" }, "Delete");
  const origin = h("p", { class: "pe-origin", id: "pe-origin" });

  let marks = new Map(); // line → messages
  let lines = 0;
  const renderGutter = () => {
    const count = yaml.value.split("\n").length;
    if (count !== lines) {
      lines = count;
      const rows = [];
      for (let i = 1; i <= count; i++) rows.push(h("div", { dataset: { line: String(i) } }, String(i)));
      gutter.replaceChildren(...rows);
    }
    for (const row of gutter.children) {
      const messages = marks.get(Number(row.dataset.line));
      row.classList.toggle("bad", Boolean(messages));
      if (messages) row.title = messages.join("\n");
      else row.removeAttribute("title");
    }
    gutter.scrollTop = yaml.scrollTop;
  };
  yaml.addEventListener("scroll", () => {
    gutter.scrollTop = yaml.scrollTop;
  });

  /** Puts the cursor at the start of `line` (1-based; column too when given) and shows it. */
  const goTo = (line, column = 1) => {
    const all = yaml.value.split("\n");
    const at = Math.min(Math.max(line, 1), all.length);
    let offset = 0;
    for (let i = 0; i < at - 1; i++) offset += all[i].length + 1;
    offset += Math.max(0, Math.min(column - 1, all[at - 1].length));
    yaml.focus();
    yaml.setSelectionRange(offset, offset);
    const lineHeight = parseFloat(getComputedStyle(yaml).lineHeight) || 20;
    const top = (at - 1) * lineHeight;
    if (top < yaml.scrollTop || top > yaml.scrollTop + yaml.clientHeight - 2 * lineHeight) {
      yaml.scrollTop = Math.max(0, top - yaml.clientHeight / 3);
    }
    gutter.scrollTop = yaml.scrollTop;
  };

  const showErrors = (errors) => {
    marks = new Map();
    for (const e of errors) {
      if (!e.line) continue;
      if (!marks.has(e.line)) marks.set(e.line, []);
      marks.get(e.line).push(e.message);
    }
    diagnostics.replaceChildren(...errors.map((e) => {
      const where = e.line ? `Line ${e.line}${e.column ? `, column ${e.column}` : ""}` : "The piece";
      const li = h("li", { dataset: e.line ? { line: String(e.line) } : {} },
        h("button", { type: "button", class: "link pe-at" }, where),
        e.path ? h("code", { class: "pe-path" }, e.path) : null,
        h("span", { class: "pe-msg" }, e.message),
      );
      if (e.line) li.addEventListener("click", () => goTo(e.line, e.column || 1));
      else li.querySelector("button").addEventListener("click", () => yaml.focus());
      return li;
    }));
    summary.textContent = errors.length
      ? `${errors.length} error${errors.length === 1 ? "" : "s"}: the piece cannot run until ${errors.length === 1 ? "it is" : "they are"} fixed.`
      : "Valid.";
    summary.className = `pe-summary ${errors.length ? "bad" : "ok"}`;
    renderGutter();
  };

  // --- The diagram and the prompts.
  const diagram = h("div", { id: "diagram", class: "pe-diagram" });
  const stale = h("p", { class: "hint pe-stale", hidden: true },
    "The text has errors: this is the diagram of its last valid version.");
  const task = h("input", { id: "prompt-task", type: "text", value: "TASK", autocomplete: "off" });
  const buttons = h("div", { class: "pe-prompt-buttons row", role: "group", "aria-label": "Movements" });
  const promptText = h("pre", { id: "prompt-text", class: "pe-prompt", tabindex: "0", hidden: true });
  const promptNote = h("p", { class: "hint", id: "prompt-note", "aria-live": "polite" },
    "Choose a movement to see the system prompt and first user message its run sends, as `maestro prompt` prints them.");
  let graph = null;
  let chosen = null;

  const showPrompt = async (movement) => {
    chosen = movement;
    for (const b of buttons.querySelectorAll("button.prompt")) {
      b.setAttribute("aria-pressed", String(b.dataset.movement === movement));
    }
    const text = task.value || "TASK";
    try {
      let prompt;
      if (piece && yaml.value === saved) {
        prompt = await api(withQuery(`${piecePath(name)}/prompt`, { movement, task: text }));
      } else {
        prompt = await api(withQuery(`${piecePath(name)}/prompt`, { movement, task: text }), {
          method: "POST", body: yaml.value, contentType: "application/yaml",
        });
      }
      if (chosen !== movement) return;
      promptText.textContent = `===== system =====\n${prompt.system}\n===== user =====\n${prompt.user}`;
      promptText.hidden = false;
      promptText.setAttribute("aria-label", `Prompts of ${movement}`);
      promptNote.textContent = `The prompts of ${movement} in its first visit, for the task “${text}”` +
        (piece && yaml.value === saved ? "." : " (from the text in the editor, not saved).");
    } catch (error) {
      if (error instanceof ApiError && (error.status === 422 || error.status === 404)) {
        promptNote.textContent = `No prompts: ${error.message}`;
        promptText.hidden = true;
        return;
      }
      throw error;
    }
  };
  const choose = (movement) => {
    showPrompt(movement).catch(fail);
    document.getElementById("prompts").scrollIntoView({ block: "nearest" });
  };

  const showGraph = (g) => {
    graph = g;
    stale.hidden = true;
    diagram.classList.remove("stale");
    drawDiagram(diagram, g, choose);
    buttons.replaceChildren(...g.movements.map((m) => h("button", {
      type: "button", class: `secondary prompt${m.parent ? " sub" : ""}`, dataset: { movement: m.name },
      "aria-pressed": String(m.name === chosen),
      title: m.parent ? `sub-movement of ${m.parent}` : null,
    }, m.name)));
    if (chosen && !g.movements.some((m) => m.name === chosen)) {
      chosen = null;
      promptText.hidden = true;
    }
  };
  buttons.addEventListener("click", (event) => {
    const b = event.target.closest("button.prompt");
    if (b) showPrompt(b.dataset.movement).catch(fail);
  });
  task.addEventListener("change", () => {
    if (chosen) showPrompt(chosen).catch(fail);
  });

  // --- Validation as you type.
  let timer = null;
  let round = 0;
  let inflight = null;
  const validate = async () => {
    const mine = ++round;
    if (inflight) inflight.abort();
    inflight = new AbortController();
    try {
      const answer = await api(withQuery("/api/v1/pieces/validate", { name }), {
        method: "POST", body: yaml.value, contentType: "application/yaml", signal: inflight.signal,
      });
      if (mine !== round) return;
      showErrors([]);
      showGraph(answer.graph);
    } catch (error) {
      if (error.name === "AbortError" || mine !== round) return;
      if (error instanceof ApiError && error.status === 422) {
        showErrors(error.problem.errors || []);
        if (graph) {
          stale.hidden = false;
          diagram.classList.add("stale");
        }
        return;
      }
      throw error;
    }
  };
  const markDirty = () => {
    const changed = yaml.value !== saved;
    if (readOnly()) dirty.textContent = changed ? "Changed here only." : "Read-only.";
    else dirty.textContent = piece ? (changed ? "Unsaved changes." : "Saved.") : "Not saved yet.";
    save.disabled = readOnly() || (piece !== null && !changed);
  };
  yaml.addEventListener("input", () => {
    renderGutter();
    markDirty();
    clearTimeout(timer);
    timer = setTimeout(() => validate().catch(fail), DEBOUNCE_MS);
  });
  // Enter keeps the line's indentation, as YAML needs.
  yaml.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === "s") {
      event.preventDefault();
      if (!save.disabled) save.click();
      return;
    }
    if (event.key !== "Enter" || event.shiftKey || event.altKey || event.ctrlKey || event.metaKey || event.isComposing) return;
    const at = yaml.selectionStart;
    const lineStart = yaml.value.lastIndexOf("\n", at - 1) + 1;
    const indent = /^[ \t]*/.exec(yaml.value.slice(lineStart, at))[0];
    if (!indent) return;
    event.preventDefault();
    yaml.setRangeText(`\n${indent}`, at, yaml.selectionEnd, "end");
    yaml.dispatchEvent(new Event("input"));
  });

  // --- Where it comes from, save and delete.
  // Stored pieces are changed by admins only (the server refuses anyone else); until
  // `/api/v1/me` answers, the buttons are as for an admin.
  let mayChange = true;
  const readOnly = () => !mayChange || Boolean(piece && piece.origin && piece.origin.kind === "dir");
  const showOrigin = () => {
    if (!mayChange) {
      origin.replaceChildren(
        h("strong", {}, "Read-only here: "), "stored pieces are changed by admins only, as every user's jobs run them. ",
        "Edits here are checked and drawn but cannot be saved.",
      );
    } else if (!piece) {
      origin.replaceChildren("Not in the store yet: ", h("strong", {}, "Save"), " writes it there, and every node's runs can use it.");
    } else if (readOnly()) {
      origin.replaceChildren(
        h("strong", {}, "Read-only here: "), "this piece is the file ", h("code", {}, piece.origin.path),
        " in a pieces directory. Change the file to change it; edits here are checked and drawn but cannot be saved.",
      );
    } else {
      origin.replaceChildren(`Version ${piece.origin.version} in the store; saving writes a new version, which every node's next job uses.`);
    }
    del.disabled = !piece || readOnly();
    origin.className = `pe-origin${readOnly() ? " notice warn" : ""}`;
    markDirty();
  };
  save.addEventListener("click", async () => {
    save.disabled = true;
    try {
      const written = await api(piecePath(name), {
        method: "PUT", body: yaml.value, contentType: "application/yaml",
      });
      saved = yaml.value;
      piece = { name, yaml: saved, origin: { kind: "store", version: written.version } };
      showOrigin();
      showErrors([]);
      notify(`Saved ${name} as version ${written.version}.`, "ok");
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        showErrors(error.problem.errors || []);
        notify(`Not saved: ${error.message}`, "error");
        markDirty();
        return;
      }
      markDirty();
      throw error;
    }
  });
  del.addEventListener("click", async () => {
    if (!piece || readOnly()) return;
    const text = yaml.value;
    const gone = piece.yaml;
    await api(piecePath(name), { method: "DELETE" });
    // A pieces directory's file of the same name shows again; else the text stays as a new piece.
    try {
      piece = await api(piecePath(name));
      saved = piece.yaml;
      yaml.value = piece.yaml;
      renderGutter();
      validate().catch(fail);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      piece = null;
      saved = null;
      yaml.value = text;
    }
    showOrigin();
    const status = document.getElementById("status");
    status.replaceChildren(h("p", { class: "notice ok" },
      `Deleted ${name} from the store. `,
      h("button", {
        type: "button", class: "link", onclick: async () => {
          try {
            const written = await api(piecePath(name), { method: "PUT", body: gone, contentType: "application/yaml" });
            piece = { name, yaml: gone, origin: { kind: "store", version: written.version } };
            saved = gone;
            yaml.value = gone;
            renderGutter();
            showOrigin();
            notify(`Restored ${name} as version ${written.version}.`, "ok");
          } catch (error) {
            fail(error);
          }
        },
      }, "Undo"),
    ));
  });

  app.replaceChildren(
    h("p", { class: "pe-back" }, h("a", { href: "/pieces" }, "← All pieces")),
    origin,
    h("div", { class: "pe-layout" },
      h("section", { class: "pe-edit", "aria-labelledby": "pe-yaml-h" },
        h("div", { class: "row" },
          h("h2", { id: "pe-yaml-h" }, h("label", { for: "yaml" }, "YAML")),
          h("span", { class: "spacer" }), dirty, save, del),
        editor,
        summary,
        diagnostics,
      ),
      h("section", { class: "pe-side", "aria-labelledby": "pe-diagram-h" },
        h("h2", { id: "pe-diagram-h" }, "Diagram"),
        stale,
        diagram,
      ),
    ),
    h("section", { id: "prompts", class: "pe-prompts card", "aria-labelledby": "pe-prompts-h" },
      h("h2", { id: "pe-prompts-h" }, "Prompts"),
      field("Task", task, "The task text the prompts are shown for."),
      buttons,
      promptNote,
      promptText,
    ),
  );
  showOrigin();
  me().then((who) => {
    mayChange = who.role === "admin";
    showOrigin();
  }).catch(() => {});
  renderGutter();

  // The piece as loaded (its graph from the API) first; the text is checked again as it changes.
  if (piece) {
    try {
      showErrors([]);
      showGraph(await api(`${piecePath(name)}/graph`));
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 422)) throw error;
      showErrors(error.problem.errors || []);
    }
  } else {
    await validate();
  }
});
