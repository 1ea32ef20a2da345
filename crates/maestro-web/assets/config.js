// `/config`: the configuration in effect (`GET /api/v1/config`, secrets as `***`) in an editor,
// saved with `If-Match`. When someone else saved first (412), the page fetches the newer
// configuration, shows their change and the user's own, key by key, and can reapply the
// user's change on top of theirs with the new ETag. A 422 lists each field at fault.
import { ApiError, api, fail, h, notify, start } from "/ui/lib.js";

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

/**
 * The changes from `before` to `after`, key by key: `[{path: ["llm", "model"], before, after}]`
 * (`before`/`after` undefined when the key was added/removed). Maps are compared key by key;
 * lists and other values whole, as the configuration's overlay replaces them whole.
 */
export function diff(before, after, path = []) {
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])];
    return keys.flatMap((k) => diff(before[k], after[k], [...path, k]));
  }
  if (same(before, after)) return [];
  return [{ path, before, after }];
}

/** `doc` with each change of `changes` laid over it (a removed key is removed). */
export function reapply(doc, changes) {
  const out = clone(doc) || {};
  for (const { path, after } of changes) {
    if (!path.length) return clone(after);
    let at = out;
    for (const k of path.slice(0, -1)) {
      if (!isObject(at[k])) at[k] = {};
      at = at[k];
    }
    const last = path[path.length - 1];
    if (after === undefined) delete at[last];
    else at[last] = clone(after);
  }
  return out;
}

const dotted = (path) => path.join(".") || "(the whole configuration)";

function shown(v) {
  if (v === undefined) return h("span", { class: "muted" }, "(not set)");
  const text = JSON.stringify(v);
  return h("code", { title: text.length > 120 ? text : null }, text.length > 120 ? `${text.slice(0, 117)}…` : text);
}

/** A readable list of changes: `llm.model: "a" → "b"`. */
function changeList(id, changes, clashes = new Set()) {
  if (!changes.length) return h("p", { id, class: "muted" }, "No change.");
  return h("ul", { id, class: "changes" }, changes.map((c) => {
    const key = dotted(c.path);
    const clash = clashes.has(key);
    return h("li", { class: clash ? "clash" : null, dataset: { key } },
      h("code", { class: "key" }, key), ": ", shown(c.before), " → ", shown(c.after),
      clash ? h("strong", { class: "clash-note" }, " (both changed this)") : null);
  }));
}

/** Where a JSON text fails to parse, as "line L, column C" when the browser says. */
function parseJson(text) {
  try {
    return { value: JSON.parse(text) };
  } catch (e) {
    const m = /position (\d+)/.exec(e.message);
    if (!m || /line \d+/.test(e.message)) return { error: e.message };
    const before = text.slice(0, Number(m[1])).split("\n");
    return { error: `${e.message} (line ${before.length}, column ${before[before.length - 1].length + 1})` };
  }
}

async function load() {
  const response = await api("/api/v1/config", { raw: true });
  return { doc: await response.json(), etag: response.headers.get("ETag") };
}

start(async () => {
  const app = document.getElementById("app");
  let { doc: loaded, etag } = await load();
  let pending = null; // the user's changes while a conflict is shown

  const editor = h("textarea", { id: "config-editor", rows: 28, spellcheck: "false", autocomplete: "off",
    autocapitalize: "off", "aria-describedby": "config-hint", class: "code" });
  const version = h("span", { id: "config-version", class: "muted" });
  const dirty = h("span", { id: "config-dirty", class: "muted", "aria-live": "polite" });
  const save = h("button", { type: "submit", id: "config-save" }, "Save");
  const reload = h("button", { type: "button", id: "config-reload", class: "secondary" }, "Reload");
  const errors = h("div", { id: "config-errors", role: "alert" });
  const conflict = h("section", { id: "config-conflict", class: "card conflict", hidden: true,
    "aria-labelledby": "config-conflict-title" });

  const show = (doc, tag) => {
    loaded = doc;
    etag = tag;
    editor.value = JSON.stringify(doc, null, 2);
    const v = /^"?v(\d+)-/.exec(etag || "");
    version.textContent = v ? `Version ${v[1]} of the stored overlay (0: this node's files alone).` : "";
    markDirty();
  };
  const markDirty = () => {
    const parsed = parseJson(editor.value);
    const changed = parsed.value === undefined || diff(loaded, parsed.value).length > 0;
    dirty.textContent = changed ? "Unsaved changes." : "";
    editor.dataset.dirty = String(changed);
  };
  editor.addEventListener("input", markDirty);
  window.addEventListener("beforeunload", (event) => {
    if (editor.dataset.dirty === "true") event.preventDefault();
  });

  /** Selects the key `a.b.c` in the editor: each key looked for after the one before. */
  const reveal = (dottedField) => {
    let at = 0;
    let found = -1;
    let key = "";
    for (key of dottedField.split(".")) {
      found = editor.value.indexOf(`"${key}"`, at);
      if (found < 0) break;
      at = found + key.length + 2;
    }
    editor.focus();
    if (found >= 0) {
      editor.setSelectionRange(found, found + key.length + 2);
      const line = editor.value.slice(0, found).split("\n").length;
      const height = editor.scrollHeight / Math.max(1, editor.value.split("\n").length);
      editor.scrollTop = Math.max(0, (line - 5) * height);
    }
  };

  const showErrors = (items) => {
    errors.replaceChildren(items.length
      ? h("div", { class: "notice error" },
        h("p", {}, h("strong", {}, "Not saved: "), items.length === 1 ? "one problem." : `${items.length} problems.`),
        h("ul", { class: "config-errors" }, items.map((i) => h("li", { dataset: { field: i.field || "" } },
          i.field ? [h("button", { type: "button", class: "link", title: "Show it in the editor",
            onclick: () => reveal(i.field) }, h("code", {}, i.field)), ": "] : null, i.message,
          i.fix ? [h("br"), h("span", { class: "hint" }, `Fix: ${i.fix}`)] : null))))
      : "");
    if (items.length) errors.scrollIntoView({ block: "nearest" });
  };

  /** PUT `doc` with the tag it was based on; answers true when saved. */
  const put = async (doc, tag) => {
    const response = await api("/api/v1/config", {
      method: "PUT", json: doc, headers: { "If-Match": tag }, raw: true,
    });
    show(await response.json(), response.headers.get("ETag"));
    showErrors([]);
    conflict.hidden = true;
    pending = null;
    notify("Configuration saved: every node's next job runs with it.", "ok");
  };

  const onWriteError = async (e, mine) => {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 412) {
      await showConflict(mine);
      return;
    }
    if (e.status === 422) {
      const list = Array.isArray(e.problem.errors) && e.problem.errors.length
        ? e.problem.errors
        : [{ field: e.problem.field, message: e.message }];
      showErrors(list);
      return;
    }
    if ([400, 413, 428].includes(e.status)) {
      showErrors([{ message: e.message }]);
      return;
    }
    throw e;
  };

  const showConflict = async (mineDoc) => {
    const base = loaded;
    // The store has a newer tag than the one refused; another node may take a moment to see it.
    let newer = await load();
    for (let i = 0; i < 5 && newer.etag === etag; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      newer = await load();
    }
    const theirs = diff(base, newer.doc);
    const mine = diff(base, mineDoc);
    const theirKeys = new Set(theirs.map((c) => dotted(c.path)));
    const clashes = new Set(mine.map((c) => dotted(c.path)).filter((k) => theirKeys.has(k)));
    pending = { mine, newer };
    const reapplyButton = h("button", { type: "button", id: "config-reapply", disabled: !mine.length },
      "Reapply my change on theirs and save");
    const discard = h("button", { type: "button", id: "config-discard", class: "secondary" },
      "Drop my change and load theirs");
    reapplyButton.addEventListener("click", async () => {
      if (!pending) return;
      const { mine: changes, newer: now } = pending;
      const merged = reapply(now.doc, changes);
      // The base for the next conflict, if the configuration moves again meanwhile.
      loaded = now.doc;
      etag = now.etag;
      editor.value = JSON.stringify(merged, null, 2);
      reapplyButton.disabled = true;
      try {
        await put(merged, now.etag);
      } catch (err) {
        await onWriteError(err, merged).catch(fail);
      } finally {
        reapplyButton.disabled = false;
      }
    });
    discard.addEventListener("click", () => {
      show(newer.doc, newer.etag);
      conflict.hidden = true;
      pending = null;
      editor.focus();
    });
    conflict.replaceChildren(
      h("h2", { id: "config-conflict-title" }, "Someone else saved the configuration first"),
      h("p", {}, "Nothing of yours was written. Here is what changed since you loaded it, and your own change."),
      h("h3", {}, "Their change"),
      changeList("config-theirs", theirs, clashes),
      h("h3", {}, "Your change"),
      changeList("config-mine", mine, clashes),
      clashes.size
        ? h("p", { class: "notice warn" }, `You both changed ${[...clashes].join(", ")}: reapplying keeps your value there.`)
        : null,
      h("div", { class: "row" }, reapplyButton, discard),
    );
    conflict.hidden = false;
    conflict.scrollIntoView({ block: "nearest" });
    reapplyButton.focus();
  };

  const form = h("form", { id: "config-form", "aria-labelledby": "config-editor-label" },
    h("div", { class: "field" },
      h("label", { for: "config-editor", id: "config-editor-label" }, "Effective configuration (JSON)"),
      h("p", { class: "hint", id: "config-hint" },
        "Secrets show as ***: leave *** in place to keep a secret, or write a new value. Only what differs ",
        "from this node's own files is stored; lists are replaced whole."),
      errors,
      editor),
    h("div", { class: "row" }, save, reload, version, dirty),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const parsed = parseJson(editor.value);
    if (parsed.value === undefined) {
      showErrors([{ field: "", message: `The editor's text is not JSON: ${parsed.error}` }]);
      editor.focus();
      return;
    }
    if (!isObject(parsed.value)) {
      showErrors([{ message: "The configuration is a JSON object ({ … })." }]);
      return;
    }
    document.getElementById("status").replaceChildren();
    save.disabled = true;
    try {
      await put(parsed.value, etag);
    } catch (e) {
      await onWriteError(e, parsed.value).catch(fail);
    } finally {
      save.disabled = false;
    }
  });
  reload.addEventListener("click", () => {
    if (editor.dataset.dirty === "true" && !confirm("Drop your unsaved changes and load the configuration again?")) return;
    load().then((fresh) => {
      show(fresh.doc, fresh.etag);
      showErrors([]);
      conflict.hidden = true;
    }).catch(fail);
  });

  show(loaded, etag);
  app.replaceChildren(conflict, form);
});
