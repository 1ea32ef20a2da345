// /jobs/{id} and /share/{token}: one job, live. The recorded events are read once as JSON lines
// and then followed as a stream from the last one, so a finished job of thousands of events
// renders at once and a running one keeps going; each recorded event is one element with its
// `data-seq`, whatever the connection did. Events are drawn once per animation frame.
import {
  ApiError, api, authHeaders, badge, bytes, duration, fileUrl, FINAL, follow, h, jobName, localTime,
  notify, num, sanitisedHtml, start, timeEl, token, tokens,
} from "/ui/lib.js";

const FOLD_CHARS = 600;
const FOLD_LINES = 10;

const VIA = {
  transition_tool: "the model called transition",
  complete_tool: "the model called complete",
  default_next: "default_next",
  aggregate: "all()/any() over the parallel results",
  tag: "the answer's tag",
  single_rule: "the only rule",
  ai_condition: "ai() conditions",
  judge: "the judge",
  frontmatter: "the frontmatter status",
  quality_gate: "a failed quality gate",
  returned: "the called workflow's result",
  when: "a when() predicate",
  engine: "the engine",
};

const share = location.pathname.startsWith("/share/");
const ident = decodeURIComponent(location.pathname.split("/")[2] || "");
const base = share ? `/share/${encodeURIComponent(ident)}` : `/api/v1/jobs/${encodeURIComponent(ident)}`;

/** Text that may be long: as is, or folded behind a summary. */
function folded(label, text, attrs = {}) {
  const long = text.length > FOLD_CHARS || text.split("\n").length > FOLD_LINES;
  const pre = h("pre", {}, text);
  if (!long) return h("div", attrs, pre);
  return h("details", attrs, h("summary", {}, `${label} (${num(text.length)} characters)`), pre);
}

function pretty(input) {
  if (typeof input === "string") return input;
  try {
    return JSON.stringify(input, null, 2);
  } catch {
    return String(input);
  }
}

/** A one-line gist of a tool's input. */
function gist(input) {
  let s = typeof input === "string" ? input : JSON.stringify(input);
  s = (s || "").replace(/\s+/g, " ");
  return s.length > 90 ? `${s.slice(0, 87)}…` : s;
}

function usageText(u) {
  return `${num(u.prompt_tokens)} in · ${num(u.completion_tokens)} out`;
}

/** The activity: visits of movements, and what happened in each. */
class Timeline {
  constructor(root, onTokens) {
    this.root = root;
    this.onTokens = onTokens;
    this.visits = new Map(); // movement -> its current visit
    this.tools = new Map(); // call_id -> tool element
    this.live = new Map(); // movement -> streaming text element
    this.seen = new Set();
    this.total = { prompt_tokens: 0, completion_tokens: 0 };
  }

  /** The element events of `movement` go into: its current visit, or the run's own list. */
  body(movement) {
    const visit = movement && this.visits.get(movement);
    return visit ? visit.body : this.root;
  }

  put(movement, el) {
    const target = this.body(movement);
    if (target === this.root) target.append(h("li", { class: "run-ev" }, el));
    else target.append(el);
    return el;
  }

  visit(rec) {
    const usage = h("span", { class: "usage" });
    const body = h("div", { class: "visit-body" });
    const nested = rec.parent && this.visits.get(rec.parent);
    const el = h(nested ? "div" : "li", {
      class: "visit",
      dataset: { movement: rec.movement, visit: rec.movement_iteration, seq: rec.seq, state: "running" },
      "aria-label": `${rec.movement}, visit ${rec.movement_iteration}`,
    },
    h("header", {},
      h("h3", {}, rec.movement),
      h("span", { class: "muted" }, `visit ${rec.movement_iteration}`,
        rec.parent ? "" : ` · step ${rec.iteration}`),
      timeEl(rec.ts),
      usage),
    body);
    const visit = { el, body, usage, tokens: { prompt_tokens: 0, completion_tokens: 0 }, parallel: null };
    if (nested) {
      const parent = this.visits.get(rec.parent);
      if (!parent.parallel) {
        parent.parallel = h("div", { class: "parallel", role: "group", "aria-label": `${rec.parent}: in parallel` });
        parent.body.append(parent.parallel);
      }
      parent.parallel.append(el);
    } else {
      this.root.append(el);
    }
    this.visits.set(rec.movement, visit);
  }

  count(movement, u) {
    const add = (t) => {
      t.prompt_tokens += u.prompt_tokens || 0;
      t.completion_tokens += u.completion_tokens || 0;
    };
    add(this.total);
    const visit = movement && this.visits.get(movement);
    if (visit) {
      add(visit.tokens);
      visit.usage.textContent = usageText(visit.tokens);
    }
    this.onTokens(this.total);
  }

  /** The model's text as it streams (not recorded; the response replaces it). */
  delta({ movement, text }) {
    let el = this.live.get(movement);
    if (!el || !el.isConnected) {
      el = h("div", { class: "ev text live", "aria-busy": "true" });
      this.body(movement).append(el);
      this.live.set(movement, el);
    }
    el.append(text);
  }

  add(rec) {
    if (this.seen.has(rec.seq)) return;
    this.seen.add(rec.seq);
    const seq = { seq: rec.seq };
    const line = (cls, ...children) => this.put(rec.movement, h("div", { class: `ev ${cls}`, dataset: seq }, ...children));
    switch (rec.type) {
      case "run_started":
        line("run", `Run ${rec.run_id} started: piece `, h("strong", {}, rec.piece),
          ` (${rec.dialect}), from `, h("strong", {}, rec.initial_movement), `, at most ${rec.max_movements} steps.`);
        break;
      case "movement_started":
        this.visit(rec);
        break;
      case "llm_request":
        line("muted call", `Model call (${rec.purpose.replace(/_/g, " ")}): ${rec.messages} messages, ${rec.tools} tools`);
        break;
      case "llm_retry":
        line("warning", `Model call failed (attempt ${rec.attempt}); again in ${duration(rec.delay_ms)}: ${rec.reason}`);
        break;
      case "tool_mode_changed":
        line("warning", `Tool mode is now ${rec.mode} for ${rec.model}: ${rec.reason}`);
        break;
      case "llm_response": {
        const live = this.live.get(rec.movement);
        if (live) {
          live.remove();
          this.live.delete(rec.movement);
        }
        const text = rec.answer ? rec.answer.content : "";
        const meta = h("span", { class: "usage" },
          `${rec.purpose === "movement" ? "" : `${rec.purpose.replace(/_/g, " ")} · `}${usageText(rec.usage)}`,
          rec.finish_reason ? ` · ${rec.finish_reason}` : "");
        if (text) {
          this.put(rec.movement, h("div", { class: "ev answer-text", dataset: seq },
            h("div", { class: "ev text" }, text), meta));
        } else {
          line("muted", `The model answered with ${rec.tool_calls} tool call${rec.tool_calls === 1 ? "" : "s"} `, meta);
        }
        this.count(rec.movement, rec.usage);
        break;
      }
      case "tool_call": {
        const input = pretty(rec.input);
        const state = h("span", { class: "state muted" }, "running…");
        const el = h("div", { class: "ev tool", dataset: { seq: rec.seq, tool: rec.tool, call: rec.call_id } },
          h("div", { class: "head" }, h("span", { class: "name" }, rec.tool), " ", state),
          folded("input", input, { class: "input" }));
        el.stateEl = state;
        this.tools.set(rec.call_id, el);
        this.put(rec.movement, el);
        break;
      }
      case "tool_result": {
        const tool = this.tools.get(rec.call_id);
        const text = rec.output ?? `(${num(rec.output_chars)} characters, not kept in the record)`;
        const out = folded(rec.ok ? "output" : "error", text, { class: "output", dataset: seq });
        if (tool) {
          tool.stateEl.textContent = rec.ok ? (rec.truncated ? "done (cut)" : "done") : "failed";
          if (!rec.ok) tool.classList.add("failed");
          tool.append(out);
        } else {
          this.put(rec.movement, h("div", { class: "ev tool" }, h("span", { class: "name" }, rec.tool), out));
        }
        break;
      }
      case "judge_request":
        line("muted", `The ${rec.kind === "judge" ? "judge" : "ai() conditions"} chooses among: `,
          rec.conditions.map((c, i) => `${i + 1}. ${c}`).join(" · "));
        break;
      case "report_written":
        line("report", `Report “${rec.name}” written (${bytes(rec.bytes)})`);
        break;
      case "context_warning":
        line("warning", `The context is ${Math.round((100 * rec.used_tokens) / rec.context_length)}% full (${rec.level})`);
        break;
      case "reminder":
        line("warning", `Reminded the model (${rec.kind.replace(/_/g, " ")}, ${rec.attempt}): `, rec.message);
        break;
      case "loop_warning":
        line("warning", `${rec.movement} is due again: ${rec.consecutive} visits in a row (limit ${rec.threshold})`);
        break;
      case "cycle_warning":
        line("warning", `The run goes round ${rec.cycle.join(" → ")} again (round ${rec.rounds} of ${rec.threshold})`);
        break;
      case "loop_detected":
        line("warning", `Loop detected: ${rec.cycle.join(" → ")}, ${rec.rounds} rounds (limit ${rec.threshold})`);
        break;
      case "loop_monitor_triggered":
        line("warning", `Loop monitor ${rec.monitor + 1} triggered after ${rec.cycle_count} cycles; ${rec.judge} judges`);
        break;
      case "warning":
        line("warning", rec.message);
        break;
      case "scratch_updated":
        line("muted", "The checklist changed");
        break;
      case "movement_finished": {
        const via = VIA[rec.via] || rec.via;
        this.put(rec.movement, h("div", { class: "ev transition", dataset: seq },
          rec.parent ? `matched “${rec.next}”` : h("span", {}, "→ ", h("strong", {}, rec.next)),
          ` · chosen by ${via}`,
          rec.rule ? ` · rule ${rec.rule}` : "",
          rec.reason ? ` · ${typeof rec.reason === "string" ? rec.reason : JSON.stringify(rec.reason)}` : "",
          rec.summary ? h("div", { class: "muted" }, rec.summary) : null));
        const visit = this.visits.get(rec.movement);
        if (visit) visit.el.dataset.state = "done";
        break;
      }
      case "run_finished":
        for (const v of this.visits.values()) v.el.dataset.state = "done";
        this.root.append(h("li", { class: "run-ev" }, h("div", { class: "ev run-end", dataset: seq },
          "The run ended: ", badge(rec.status), rec.reason ? ` (${typeof rec.reason === "string" ? rec.reason : JSON.stringify(rec.reason)})` : "")));
        break;
      case "user_input":
        line("answer", h("strong", {}, "Answer: "), rec.text);
        break;
      case "workflow_call_started":
        line("muted", `Calls workflow `, h("strong", {}, rec.workflow), ` (call ${rec.invocation})`);
        break;
      case "workflow_call_returned":
        line("muted", `Workflow ${rec.workflow} returned `, h("strong", {}, rec.result));
        break;
      case "selection_made":
        line("muted", "Selected: ", rec.effective.length ? rec.effective.join(", ") : "nothing from the pool", rec.rationale ? ` (${rec.rationale})` : "");
        break;
      case "team_leader_planned":
        line("muted", rec.parts.length ? `Batch ${rec.batch}: ${rec.parts.map((p) => p.title || p.id).join(", ")}` : "The leader planned no more parts");
        break;
      case "arpeggio_batch_failed":
        line("warning", `Batch ${rec.batch}, attempt ${rec.attempt} failed: ${rec.error}`);
        break;
      case "effect_result":
        line(rec.result && rec.result.success ? "muted" : "warning", `Effect ${rec.effect}: `, rec.result && rec.result.success ? "succeeded" : "did not succeed");
        break;
      case "quality_gate_checked":
        line(rec.passed ? "muted" : "warning", `Quality gate “${rec.gate}” `, rec.passed ? "passed" : "failed: the step goes again");
        break;
      case "subtasks_ended":
        line("muted", "Subtasks ended: ", rec.children.map((c) => `${c.title} (${c.status})`).join(", "));
        break;
      case "run_resumed":
        this.root.append(h("li", { class: "run-ev" }, h("div", { class: "ev muted", dataset: seq },
          `The run resumed from its record after event ${rec.after_seq}.`)));
        break;
      default:
        line("muted", rec.type.replace(/_/g, " "));
    }
  }
}

start(async () => {
  const app = document.getElementById("app");
  let job = await api(base);
  document.getElementById("title").textContent = jobName(job);
  document.title = `${jobName(job)} · Maestro`;

  const statusEl = h("span", { id: "job-status" }, badge(job.status));
  const conn = h("span", { id: "conn", class: "conn", dataset: { state: "ended" }, "aria-live": "polite" });
  const fact = (label, id) => h("div", {}, h("dt", {}, label), h("dd", { id }, "–"));
  const facts = h("dl", { class: "facts" },
    fact("Piece", "f-piece"), fact("Owner", "f-owner"), fact("Submitted", "f-created"),
    fact("Duration", "f-duration"), fact("Tokens", "f-tokens"), fact("Attempt", "f-attempt"));
  const actions = h("div", { class: "row" });
  const question = h("section", { id: "question", class: "card question", hidden: true, "aria-labelledby": "q-h" });
  const timeline = h("ol", { id: "timeline", class: "timeline", "aria-label": "Activity" });
  const result = h("div", { id: "result", class: "result" }, h("p", { class: "muted" }, "No result yet."));
  const files = h("ul", { id: "files", class: "files" });
  const children = h("ul", { id: "children", class: "tree" });
  const sharePanel = h("section", { class: "card", id: "share-panel", hidden: true, "aria-labelledby": "share-h" });

  app.replaceChildren(
    h("div", { class: "job-head" }, statusEl, conn, h("span", { class: "spacer" }), actions),
    facts,
    question,
    h("div", { class: "layout" },
      h("section", { "aria-labelledby": "activity-h" }, h("h2", { id: "activity-h" }, "Activity"), timeline),
      h("div", { class: "side" },
        h("section", { class: "card", "aria-labelledby": "result-h" }, h("h2", { id: "result-h" }, "Result"), result),
        h("section", { class: "card", "aria-labelledby": "files-h" }, h("h2", { id: "files-h" }, "Files"), files),
        h("section", { class: "card", id: "children-card", hidden: true, "aria-labelledby": "children-h" },
          h("h2", { id: "children-h" }, "Subtasks"), children),
        sharePanel,
        h("section", { class: "card", "aria-labelledby": "task-h" }, h("h2", { id: "task-h" }, "Task"),
          h("pre", { class: "task" }, job.task || "")))),
  );

  const tl = new Timeline(timeline, (total) => {
    document.getElementById("f-tokens").textContent = `${num(total.prompt_tokens + total.completion_tokens)} (${usageText(total)})`;
  });

  // ---- the job's facts, result, question, files and subtasks, from the job's JSON
  let shown = "";
  function show() {
    statusEl.replaceChildren(badge(job.status));
    document.getElementById("f-piece").textContent = job.piece;
    document.getElementById("f-owner").textContent = job.owner || "–";
    document.getElementById("f-created").replaceChildren(timeEl(job.created_at));
    const end = FINAL.has(job.status) ? new Date(job.updated_at) : new Date();
    document.getElementById("f-duration").textContent = duration(end - new Date(job.created_at));
    document.getElementById("f-attempt").textContent = job.attempt ?? "–";
    if (!tl.total.prompt_tokens && job.usage) {
      document.getElementById("f-tokens").textContent = num(tokens(job.usage));
    }
    // A job that waits shows its question above; its result is not in yet.
    const html = job.status !== "waiting_input" && job.result && job.result.html;
    if (html && html !== shown) {
      shown = html;
      result.replaceChildren(sanitisedHtml(h("div", { class: "markdown" }), html));
    } else if (!html && FINAL.has(job.status) && job.reason) {
      result.replaceChildren(h("p", {}, job.reason));
    }
    showQuestion();
    if (!share) showActions();
  }

  function showQuestion() {
    const waiting = job.status === "waiting_input" && !share;
    question.hidden = !(job.status === "waiting_input");
    if (question.hidden) {
      question.replaceChildren();
      return;
    }
    if (question.dataset.for === job.question) return;
    question.dataset.for = job.question || "";
    const text = h("div", { id: "question-text" });
    if (job.question_html) sanitisedHtml(text, job.question_html);
    else text.textContent = job.question || "";
    const answer = h("textarea", { id: "answer", rows: 3, required: true });
    const send = h("button", { type: "submit", id: "answer-send" }, "Answer");
    const form = h("form", { id: "answer-form" },
      h("label", { for: "answer" }, "Your answer"), answer,
      h("p", { class: "hint" }, "The job goes on with it. Enter sends; Shift+Enter starts a new line."),
      h("div", { class: "row" }, send));
    answer.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!answer.value.trim()) return;
      send.disabled = true;
      try {
        await api(`${base}/comments`, { method: "POST", json: { body: answer.value } });
        notify("Answered: the job goes on.", "ok");
        question.hidden = true;
        await refresh();
      } catch (err) {
        send.disabled = false;
        if (err instanceof ApiError && err.status === 409) {
          notify(`Someone answered first; yours is kept as a note. ${err.message}`, "warn");
          await refresh();
        } else throw err;
      }
    });
    question.replaceChildren(h("h2", { id: "q-h" }, "The job asks"), text, waiting ? form : null);
    if (waiting) answer.focus();
  }

  // Cancel (two steps, no dialog) and share.
  function showActions() {
    if (actions.dataset.done === String(FINAL.has(job.status))) return;
    actions.dataset.done = String(FINAL.has(job.status));
    const cancel = h("button", { type: "button", id: "cancel", class: "danger" }, "Cancel");
    cancel.hidden = FINAL.has(job.status);
    cancel.addEventListener("click", async () => {
      if (cancel.dataset.armed !== "1") {
        cancel.dataset.armed = "1";
        cancel.textContent = "Really cancel?";
        setTimeout(() => {
          cancel.dataset.armed = "";
          cancel.textContent = "Cancel";
        }, 4000);
        return;
      }
      cancel.disabled = true;
      await api(`${base}/cancel`, { method: "POST" });
      notify("Cancelled.", "ok");
      await refresh();
    });
    const shareBtn = h("button", { type: "button", id: "share", class: "secondary" }, "Share");
    shareBtn.addEventListener("click", async () => {
      const made = await api(`${base}/share`, { method: "POST", json: {} });
      const url = new URL(`/share/${made.token}`, location.origin).href;
      sharePanel.hidden = false;
      const input = document.getElementById("share-url");
      input.value = url;
      input.select();
      await listShares();
    });
    actions.replaceChildren(cancel, shareBtn);
  }

  async function listShares() {
    const list = await api(`${base}/shares`);
    const ul = document.getElementById("shares");
    ul.replaceChildren(...list.filter((s) => !s.revoked).map((s) => h("li", { class: "row" },
      h("span", {}, `Link made ${localTime(s.created_at)}`, s.expires_at ? `, until ${localTime(s.expires_at)}` : ""),
      h("button", { type: "button", class: "revoke secondary", dataset: { shareId: s.id }, onclick: async () => {
        await api(`${base}/shares/${s.id}`, { method: "DELETE" });
        notify("The link no longer works.", "ok");
        await listShares();
      } }, "Revoke"))));
  }

  if (!share) {
    sharePanel.append(h("h2", { id: "share-h" }, "Share"),
      h("label", { for: "share-url" }, "Read-only link (anyone with it can see this job)"),
      h("input", { id: "share-url", readonly: true, type: "url" }),
      h("ul", { id: "shares" }));
    api(`${base}/shares`).then((list) => {
      if (list.some((s) => !s.revoked)) {
        sharePanel.hidden = false;
        return listShares();
      }
      return null;
    }).catch(() => {});
  }

  // ---- files
  async function download(e, f) {
    if (!token()) return; // the cookie (or no auth) lets the link work as it is
    e.preventDefault();
    const response = await fetch(fileUrl(base, f.path), { headers: authHeaders() });
    if (!response.ok) throw new ApiError(response.status, null, response);
    const url = URL.createObjectURL(await response.blob());
    const a = h("a", { href: url, download: f.path.split("/").pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  async function preview(li, f) {
    const old = li.querySelector(".preview");
    if (old) {
      old.remove();
      return;
    }
    const box = h("div", { class: "preview" });
    li.append(box);
    const ext = f.path.split(".").pop().toLowerCase();
    const response = await fetch(fileUrl(base, f.path, true), { headers: authHeaders() });
    if (!response.ok) throw new ApiError(response.status, null, response);
    if (["png", "jpg", "jpeg"].includes(ext)) {
      box.append(h("img", { src: URL.createObjectURL(await response.blob()), alt: f.path }));
    } else if (ext === "pdf") {
      box.append(h("iframe", { src: URL.createObjectURL(await response.blob()), title: f.path }));
    } else {
      const text = await response.text();
      box.append(h("pre", {}, text.length > 200000 ? `${text.slice(0, 200000)}\n… (cut; download it for the rest)` : text));
    }
  }

  const previewable = (p) => /\.(txt|md|csv|log|ya?ml|toml|json|rs|py|js|ts|png|jpe?g|pdf)$/i.test(p);
  async function showFiles() {
    const list = await api(`${base}/files`);
    files.replaceChildren(...(list.length ? list.map((f) => {
      const li = h("li", { dataset: { path: f.path, kind: f.kind || "output" } });
      const a = h("a", { class: "download", href: fileUrl(base, f.path), download: f.path.split("/").pop() }, f.path);
      a.addEventListener("click", (e) => download(e, f).catch((err) => notify(String(err.message), "error")));
      li.append(a, h("span", { class: "muted" }, ` ${f.kind || "output"} · ${bytes(f.size)}`));
      if (previewable(f.path)) {
        li.append(h("button", { type: "button", class: "preview link", onclick: () => preview(li, f).catch((err) => notify(String(err.message), "error")) }, "Preview"));
      }
      return li;
    }) : [h("li", { class: "muted" }, "No files yet.")]));
  }

  // ---- subtasks, as a tree
  async function childTree(id, depth) {
    const page = await api(`/api/v1/jobs/${id}/children`);
    const items = [];
    for (const c of page.jobs) {
      const li = h("li", { dataset: { jobId: c.id } }, badge(c.status), " ", h("a", { href: `/jobs/${c.id}` }, jobName(c)));
      if (depth < 3) {
        const sub = await childTree(c.id, depth + 1);
        if (sub.length) li.append(h("ul", { class: "tree" }, ...sub));
      }
      items.push(li);
    }
    return items;
  }
  async function showChildren() {
    if (share) return;
    const items = await childTree(job.id, 1);
    document.getElementById("children-card").hidden = items.length === 0;
    children.replaceChildren(...items);
  }

  async function refresh() {
    job = await api(base);
    show();
    await Promise.all([showFiles(), showChildren()]);
  }

  show();
  showFiles().catch(() => {});
  showChildren().catch(() => {});

  // ---- the events: the record at once, then live
  let pending = [];
  let frame = 0;
  const drain = () => {
    frame = 0;
    const stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    for (const item of pending) {
      if (item.delta) tl.delta(item.delta);
      else tl.add(item);
    }
    pending = [];
    if (stick && !FINAL.has(job.status)) window.scrollTo(0, document.body.scrollHeight);
  };
  const queue = (item) => {
    pending.push(item);
    if (!frame) frame = requestAnimationFrame(drain);
  };

  const records = await api(`${base}/events?format=jsonl`, { raw: true, headers: { Accept: "application/x-ndjson" } });
  const jsonl = await records.text();
  let last = 0;
  for (const line of jsonl.split("\n")) {
    if (!line.trim()) continue;
    const rec = JSON.parse(line);
    tl.add(rec);
    last = Math.max(last, rec.seq);
  }
  if (FINAL.has(job.status)) {
    conn.dataset.state = "ended";
    conn.textContent = "";
    return;
  }
  let refreshing = null;
  const again = () => {
    refreshing = refreshing || refresh().finally(() => {
      refreshing = null;
    });
  };
  follow(`${base}/events`, {
    onEvent: queue,
    onDelta: (delta) => queue({ delta }),
    onStatus: (status) => {
      if (status !== job.status) again();
    },
    onResync: () => again(),
    onConnection: (state) => {
      conn.dataset.state = state;
      conn.textContent = { live: "● live", reconnecting: "reconnecting…", ended: "" }[state];
      if (state === "ended") again();
    },
  }, last);
});
