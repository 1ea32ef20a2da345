// `/pieces`: every piece a run can use (the pieces directories' and the store's), each linked
// to its editor, and a form that starts a new one.
import { api, field, h, notify, start } from "/ui/lib.js";

/** Where a piece comes from, in words. */
function originText(origin) {
  if (!origin) return "";
  return origin.kind === "store" ? "store" : `file ${origin.path}`;
}

start(async () => {
  const app = document.getElementById("app");
  const pieces = await api("/api/v1/pieces");

  const name = h("input", {
    id: "new-piece-name", name: "name", type: "text", required: true, autocomplete: "off",
    autocapitalize: "off", spellcheck: "false", pattern: "[a-z0-9][a-z0-9._\\-]*",
    placeholder: "my-piece",
  });
  const form = h("form", { id: "new-piece", class: "card pe-new", "aria-labelledby": "new-piece-h" },
    h("h2", { id: "new-piece-h" }, "New piece"),
    h("div", { class: "row pe-new-row" },
      field("Name", name, "Lowercase letters, digits, “.”, “_” and “-”, starting with a letter or digit."),
      h("button", { type: "submit", id: "new-piece-go" }, "New piece"),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = name.value.trim();
    if (!/^[a-z0-9][a-z0-9._-]*$/.test(wanted) || wanted === "auto") {
      notify("A piece name uses lowercase letters, digits, “.”, “_” and “-”, starts with a letter or digit, and is not “auto”.", "error");
      name.focus();
      return;
    }
    if (pieces.some((p) => p.name === wanted)) {
      notify(`A piece named ${wanted} exists already; it is opened instead.`, "info");
    }
    location.assign(`/pieces/${encodeURIComponent(wanted)}`);
  });

  const rows = pieces.map((p) => h("tr", { dataset: { piece: p.name } },
    h("td", { "data-label": "Name" }, h("a", { href: `/pieces/${encodeURIComponent(p.name)}` }, p.name)),
    h("td", { "data-label": "Description" }, p.description || h("span", { class: "muted" }, "–")),
    h("td", { "data-label": "Origin" }, p.origin && p.origin.kind === "dir"
      ? h("span", {}, "file ", h("code", {}, p.origin.path))
      : originText(p.origin)),
    h("td", { "data-label": "Version", class: "num" }, p.version == null ? "–" : String(p.version)),
  ));
  const table = pieces.length
    ? h("div", { class: "table-wrap" },
      h("table", { id: "pieces", class: "stack" },
        h("caption", { class: "pe-caption" }, `${pieces.length} piece${pieces.length === 1 ? "" : "s"}: a piece in the store overrides a file of the same name`),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Name"),
          h("th", { scope: "col" }, "Description"),
          h("th", { scope: "col" }, "Origin"),
          h("th", { scope: "col", class: "num" }, "Version"))),
        h("tbody", {}, rows)))
    : h("div", {},
      h("table", { id: "pieces", hidden: true }),
      h("p", { class: "muted" }, "No pieces yet: start one below, or put piece files in a pieces directory."));
  app.replaceChildren(table, form);
});
