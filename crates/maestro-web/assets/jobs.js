// /jobs: the job list. Filters by status and piece (kept in the URL), pages by cursor ("More"),
// and keeps the first page fresh while the tab is visible, so statuses change as jobs move.
import { api, badge, duration, FINAL, h, jobName, num, start, timeEl, tokens, withQuery } from "/ui/lib.js";

const STATUSES = ["queued", "running", "waiting_input", "waiting_subtasks", "completed", "aborted",
  "exceeded", "failed", "cancelled"];
const REFRESH_MS = 2000;

function elapsed(job) {
  const end = FINAL.has(job.status) ? new Date(job.updated_at).getTime() : Date.now();
  return end - new Date(job.created_at).getTime();
}

function cell(label, ...children) {
  return h("td", { dataset: { label } }, ...children);
}

function row(job) {
  return h("tr", { dataset: { jobId: job.id, status: job.status } },
    cell("Status", badge(job.status)),
    cell("Job",
      h("a", { href: `/jobs/${job.id}` }, jobName(job)),
      job.parent_id ? h("span", { class: "muted" }, " · subtask") : null,
      job.status === "waiting_input" && job.question
        ? h("div", { class: "question muted" }, `Asks: ${job.question.split("\n")[0]}`)
        : null),
    cell("Piece", job.piece),
    cell("Owner", job.owner || "–"),
    cell("Age", timeEl(job.created_at)),
    h("td", { class: "num", dataset: { label: "Duration" } }, duration(elapsed(job))),
    h("td", { class: "num", dataset: { label: "Tokens" } }, num(tokens(job.usage))),
  );
}

start(async () => {
  const app = document.getElementById("app");
  const params = new URLSearchParams(location.search);
  const filter = { status: params.get("status") || "", piece: params.get("piece") || "" };

  const status = h("select", { id: "filter-status", name: "status" },
    h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s }, s.replace(/_/g, " "))));
  status.value = filter.status;
  const piece = h("select", { id: "filter-piece", name: "piece" }, h("option", { value: "" }, "any"),
    h("option", { value: "auto" }, "auto"));
  const body = h("tbody");
  const more = h("button", { type: "button", id: "next-page", class: "secondary", hidden: true }, "More");
  const empty = h("p", { class: "muted", hidden: true }, "No jobs yet. ", h("a", { href: "/" }, "Submit a task"), ".");
  app.replaceChildren(
    h("form", { class: "row filters", role: "search", "aria-label": "Filter jobs" },
      h("label", { for: "filter-status" }, "Status"), status,
      h("label", { for: "filter-piece" }, "Piece"), piece,
      h("span", { class: "spacer" }),
      h("a", { class: "button", href: "/" }, "New task")),
    h("div", { class: "table-wrap" },
      h("table", { id: "jobs", class: "stack" },
        h("caption", { class: "muted" }, "Newest first"),
        h("thead", {}, h("tr", {},
          ["Status", "Job", "Piece", "Owner", "Age"].map((t) => h("th", { scope: "col" }, t)),
          h("th", { scope: "col", class: "num" }, "Duration"),
          h("th", { scope: "col", class: "num" }, "Tokens"))),
        body)),
    empty,
    h("div", { class: "row" }, more),
  );

  api("/api/v1/pieces").then((pieces) => {
    for (const p of pieces) piece.append(h("option", { value: p.name }, p.name));
    piece.value = filter.piece;
  }).catch(() => {});
  piece.value = filter.piece;

  const change = () => {
    const q = withQuery("/jobs", { status: status.value, piece: piece.value });
    history.replaceState(null, "", q);
    filter.status = status.value;
    filter.piece = piece.value;
    load();
  };
  status.addEventListener("change", change);
  piece.addEventListener("change", change);

  let cursor = null;
  let generation = 0;
  const page = (after) => api(withQuery("/api/v1/jobs", { ...filter, cursor: after, limit: 50 }));

  async function load() {
    const mine = ++generation;
    const first = await page(null);
    if (mine !== generation) return;
    body.replaceChildren(...first.jobs.map(row));
    cursor = first.next_cursor || null;
    more.hidden = !cursor;
    empty.hidden = first.jobs.length > 0;
  }

  more.addEventListener("click", async () => {
    const next = await page(cursor);
    body.append(...next.jobs.map(row));
    cursor = next.next_cursor || null;
    more.hidden = !cursor;
  });

  // The first page again: rows that changed are replaced in place, new jobs come in on top.
  async function refresh() {
    if (document.hidden) return;
    const mine = generation;
    const first = await page(null);
    if (mine !== generation) return;
    const rows = new Map([...body.children].map((tr) => [tr.dataset.jobId, tr]));
    let anchor = body.firstElementChild;
    for (const job of first.jobs) {
      const old = rows.get(job.id);
      const fresh = row(job);
      if (old) {
        // In place, cell by cell, so that a focused link keeps its focus.
        [...old.children].forEach((td, i) => {
          if (td.textContent !== fresh.children[i].textContent) td.replaceChildren(...fresh.children[i].childNodes);
        });
        old.dataset.status = job.status;
        anchor = old.nextElementSibling;
      } else {
        body.insertBefore(fresh, anchor);
      }
    }
    empty.hidden = body.children.length > 0;
  }

  await load();
  setInterval(() => refresh().catch(() => {}), REFRESH_MS);
  document.addEventListener("visibilitychange", () => refresh().catch(() => {}));
});
