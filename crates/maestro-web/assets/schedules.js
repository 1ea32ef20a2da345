// `/schedules`: every schedule the caller may see, with its next fire times in the schedule's
// own zone (and how far off they are); add, edit, pause, resume and delete through
// `/api/v1/schedules…`.
import { ApiError, api, fail, field, h, localTime, me, notify, start, timeEl } from "/ui/lib.js";

const SPEC_HINT =
  "One of: cron 0 9 * * 1-5 · every 30m · daily 09:00 · weekly mon@09:00 · monthly 1@09:00 · " +
  "once 2026-12-01T09:00:00Z. Times are read in the zone below.";

const browserZone = () => {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
};

/** "Mon 09:00 Europe/Paris" (or "Mon 6 Apr, 09:00 Europe/Paris" when more than a week away). */
export function inZone(iso, tz, now = Date.now()) {
  const at = new Date(iso);
  const far = at.getTime() - now > 6.5 * 86400000;
  let text;
  try {
    text = new Intl.DateTimeFormat(undefined, {
      timeZone: tz,
      weekday: "short",
      day: far ? "numeric" : undefined,
      month: far ? "short" : undefined,
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    }).format(at);
  } catch {
    // A zone this browser does not know: show UTC, and say so.
    return `${at.toISOString().slice(0, 16).replace("T", " ")} UTC`;
  }
  return `${text} ${tz}`;
}

/** One slot: the wall-clock time in the schedule's zone, then how far off (local on hover). */
function slot(iso, tz) {
  return h("span", { class: "slot", dataset: { at: iso } },
    h("span", { class: "zoned", title: localTime(iso) }, inZone(iso, tz)), " · ", timeEl(iso));
}

function nextFires(s) {
  if (s.paused) return h("span", { class: "muted" }, "paused");
  const list = s.next_fires && s.next_fires.length ? s.next_fires : s.next_fire ? [s.next_fire] : [];
  if (!list.length) return h("span", { class: "muted" }, "no more (spent)");
  const [first, ...rest] = list;
  return h("div", { class: "next-fires" },
    slot(first, s.tz),
    rest.length
      ? h("details", {},
        h("summary", {}, `then ${rest.length} more`),
        h("ol", { class: "slots" }, rest.map((at) => h("li", {}, slot(at, s.tz)))))
      : null,
  );
}

start(async () => {
  const app = document.getElementById("app");
  const [who, pieces] = await Promise.all([
    me(),
    api("/api/v1/pieces").catch((e) => {
      if (e instanceof ApiError && e.status === 401) throw e;
      return [];
    }),
  ]);
  const canWrite = (who.scopes || []).includes("write");

  // ---- The form (add, or edit one) ---------------------------------------------------
  let editing = null;
  const pieceSelect = h("select", { id: "schedule-piece", name: "piece" },
    h("option", { value: "auto" }, "auto"),
    pieces.map((p) => h("option", { value: p.name }, p.name)),
  );
  const task = h("textarea", { id: "schedule-task", name: "task", rows: 3, required: true,
    placeholder: "What each fired job should do" });
  const spec = h("input", { id: "schedule-spec", name: "spec", required: true, autocomplete: "off",
    spellcheck: "false", placeholder: "daily 09:00" });
  const zones = h("datalist", { id: "zones" });
  try {
    for (const z of Intl.supportedValuesOf("timeZone")) zones.append(h("option", { value: z }));
  } catch {
    // Older browsers: no list, the field still takes any name.
  }
  const tz = h("input", { id: "schedule-tz", name: "tz", list: "zones", autocomplete: "off",
    spellcheck: "false", value: browserZone() });
  const misfire = h("select", { id: "schedule-misfire", name: "misfire" },
    h("option", { value: "skip" }, "skip"),
    h("option", { value: "catch_up_once" }, "catch up once"),
  );
  const controls = { piece: pieceSelect, task, spec, tz, misfire };
  const errors = {};
  const withError = (name, label, control, hint) => {
    const wrap = field(label, control, hint);
    errors[name] = h("p", { class: "field-error", id: `${control.id}-error`, role: "alert", hidden: true });
    wrap.append(errors[name]);
    return wrap;
  };
  const formTitle = h("h2", { id: "schedule-form-title" }, "Add a schedule");
  const save = h("button", { type: "submit", id: "schedule-save" }, "Add schedule");
  const cancelEdit = h("button", { type: "button", class: "secondary", id: "schedule-cancel", hidden: true,
    onclick: () => reset() }, "Cancel edit");
  const formError = h("p", { class: "notice error", role: "alert", hidden: true });
  const form = h("form", { id: "schedule-form", class: "card", "aria-labelledby": "schedule-form-title",
    novalidate: true },
    formTitle,
    withError("piece", "Piece", pieceSelect, "auto lets the worker choose the piece for each job."),
    withError("task", "Task", task),
    withError("spec", "When", spec, SPEC_HINT),
    withError("tz", "Time zone", tz, "A tz database name, e.g. Europe/Paris, America/New_York, UTC."),
    withError("misfire", "Missed slots", misfire,
      "Slots that pass while no node runs: skip them all, or fire one job for them when a node is back."),
    formError,
    h("div", { class: "row" }, save, cancelEdit),
  );

  const clearErrors = () => {
    for (const [name, p] of Object.entries(errors)) {
      p.hidden = true;
      p.textContent = "";
      controls[name].removeAttribute("aria-invalid");
      const hint = controls[name].getAttribute("aria-describedby") || "";
      controls[name].setAttribute("aria-describedby", hint.replace(` ${p.id}`, ""));
    }
    formError.hidden = true;
  };
  const showError = (name, message) => {
    const p = errors[name];
    if (!p) {
      formError.textContent = message;
      formError.hidden = false;
      return;
    }
    p.textContent = message;
    p.hidden = false;
    controls[name].setAttribute("aria-invalid", "true");
    const described = controls[name].getAttribute("aria-describedby") || "";
    controls[name].setAttribute("aria-describedby", `${described} ${p.id}`.trim());
    controls[name].focus();
  };
  const reset = () => {
    editing = null;
    form.reset();
    tz.value = browserZone();
    formTitle.textContent = "Add a schedule";
    save.textContent = "Add schedule";
    cancelEdit.hidden = true;
    clearErrors();
  };
  const edit = (s) => {
    editing = s;
    if (![...pieceSelect.options].some((o) => o.value === s.piece)) {
      pieceSelect.append(h("option", { value: s.piece }, s.piece));
    }
    pieceSelect.value = s.piece;
    task.value = s.task;
    spec.value = s.spec;
    tz.value = s.tz;
    misfire.value = s.misfire;
    formTitle.textContent = "Edit schedule";
    save.textContent = "Save changes";
    cancelEdit.hidden = false;
    clearErrors();
    form.scrollIntoView({ block: "start" });
    task.focus();
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    if (!task.value.trim()) return showError("task", "Write the task each fired job runs.");
    if (!spec.value.trim()) return showError("spec", "Say when it fires.");
    const body = {
      piece: pieceSelect.value,
      task: task.value,
      spec: spec.value.trim(),
      tz: tz.value.trim() || "UTC",
      misfire: misfire.value,
    };
    save.disabled = true;
    try {
      const saved = editing
        ? await api(`/api/v1/schedules/${encodeURIComponent(editing.id)}`, { method: "PUT", json: body })
        : await api("/api/v1/schedules", { method: "POST", json: body });
      notify(editing ? "Schedule saved." : `Schedule added; it fires next ${saved.next_fire
        ? inZone(saved.next_fire, saved.tz) : "never"}.`, "ok");
      reset();
      await refresh();
    } catch (e) {
      if (e instanceof ApiError && [400, 422].includes(e.status)) {
        showError(e.problem.field, e.message);
      } else if (e instanceof ApiError && e.status === 404 && editing) {
        showError(null, "This schedule was deleted meanwhile; add it again.");
        await refresh();
      } else {
        throw e;
      }
    } finally {
      save.disabled = false;
    }
  });

  // ---- The list ----------------------------------------------------------------------
  const tbody = h("tbody", {});
  const table = h("table", { id: "schedules", class: "stack" },
    h("caption", { class: "visually-hidden" }, "Schedules"),
    h("thead", {}, h("tr", {},
      ["Piece", "Task", "When (zone)", "State", "Next fire", "Fired / missed", "Owner", "Actions"]
        .map((t) => h("th", { scope: "col" }, t)))),
    tbody,
  );

  const act = async (s, verb) => {
    if (verb === "delete") {
      if (!confirm(`Delete the schedule "${s.task.slice(0, 60)}"? The jobs it fired stay.`)) return;
      await api(`/api/v1/schedules/${encodeURIComponent(s.id)}`, { method: "DELETE" });
      if (editing && editing.id === s.id) reset();
      notify("Schedule deleted.", "ok");
    } else {
      await api(`/api/v1/schedules/${encodeURIComponent(s.id)}/${verb}`, { method: "POST" });
      notify(verb === "pause" ? "Schedule paused: it fires nothing until resumed." :
        "Schedule resumed: it fires from its next slot.", "ok");
    }
    await refresh();
  };

  const row = (s) => {
    const button = (cls, label, hidden, verb) => h("button", {
      type: "button", class: `${cls}${cls === "delete" ? " danger" : " secondary"}`, hidden,
      "aria-label": `${label}: ${s.task.slice(0, 40)}`,
      onclick: () => (verb ? act(s, verb) : edit(s)).catch(failHere),
    }, label);
    return h("tr", { dataset: { scheduleId: s.id, paused: String(s.paused) } },
      h("td", { "data-label": "Piece" }, h("code", {}, s.piece)),
      h("td", { "data-label": "Task", class: "task" }, s.task),
      h("td", { "data-label": "When", class: "spec" },
        h("div", {}, h("code", {}, s.spec), h("div", { class: "muted small zone" }, s.tz))),
      h("td", { "data-label": "State" },
        h("span", { class: `badge ${s.paused ? "s-cancelled" : "s-running"}` }, s.paused ? "paused" : "active"),
        s.misfire !== "skip" ? h("span", { class: "muted small" }, ` ${s.misfire}`) : null),
      h("td", { "data-label": "Next fire" }, nextFires(s)),
      h("td", { "data-label": "Fired / missed", class: "num" }, `${s.fired} / ${s.missed}`),
      h("td", { "data-label": "Owner" }, s.owner || h("span", { class: "muted" }, "–")),
      h("td", { "data-label": "Actions" }, canWrite
        ? h("div", { class: "row actions" },
          button("edit", "Edit"),
          button("pause", "Pause", s.paused, "pause"),
          button("resume", "Resume", !s.paused, "resume"),
          button("delete", "Delete", false, "delete"))
        : h("span", { class: "muted" }, "read-only")),
    );
  };

  const failHere = (e) => {
    if (e instanceof ApiError && e.status === 404) {
      notify("That schedule is gone (deleted meanwhile).", "error");
      refresh().catch(() => {});
      return;
    }
    fail(e);
  };

  const refresh = async () => {
    const list = await api("/api/v1/schedules");
    tbody.replaceChildren(...list.map(row));
    if (!list.length) {
      tbody.append(h("tr", { class: "empty" }, h("td", { colspan: 8, class: "muted" },
        "No schedules yet.", canWrite ? " Add one with the form below." : "")));
    }
  };

  app.replaceChildren(
    h("section", { "aria-labelledby": "title", class: "listing" },
      h("p", { class: "hint" }, "Next fire times are shown in each schedule's own zone; hover for your local time."),
      h("div", { class: "table-wrap" }, table)),
    canWrite ? form : null,
    zones,
  );
  await refresh();
});
