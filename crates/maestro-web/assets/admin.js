// `/admin`: users (add, change role), API tokens (create: shown once; revoke), the live
// workers (refreshed every 5 s while the page is visible) and the audit log, a page at a time.
// Everything through `/api/v1/admin/…` and `/api/v1/workers`.
import { ApiError, api, fail, field, h, me, notify, start, timeEl, withQuery } from "/ui/lib.js";

const ROLES = ["admin", "user", "disabled"];
const SCOPES = ["read", "write", "admin"];
const WORKERS_EVERY_MS = 5000;
const AUDIT_PAGE = 50;

const enc = encodeURIComponent;
const cell = (label, ...children) => h("td", { "data-label": label }, ...children);
const head = (...titles) => h("thead", {}, h("tr", {}, titles.map((t) => h("th", { scope: "col" }, t))));
const none = () => h("span", { class: "muted" }, "–");

/** Runs an action from a button; a failure is shown, the page stays. */
const guarded = (fn) => (event) => {
  Promise.resolve().then(() => fn(event)).catch((e) => {
    if (e instanceof ApiError && ![401, 403].includes(e.status)) notify(`${e.status}: ${e.message}`, "error");
    else fail(e);
  });
};

start(async () => {
  const app = document.getElementById("app");
  const who = await me();
  // The first call tells a non-admin that this page is not for them (fail() shows the 403).
  await api("/api/v1/admin/users");

  // ---- Users -------------------------------------------------------------------------
  const usersBody = h("tbody", {});
  const usersTable = h("table", { id: "users", class: "stack" },
    h("caption", { class: "visually-hidden" }, "Users"),
    head("E-mail", "Role", "Added"), usersBody);
  const userList = h("datalist", { id: "user-emails" });
  let users = [];

  const userRow = (u) => {
    const select = h("select", { class: "role", name: "role", "aria-label": `Role of ${u.email}` },
      ROLES.map((r) => h("option", { value: r, selected: r === u.role }, r)));
    select.addEventListener("change", guarded(async () => {
      const role = select.value;
      if (u.email === who.email && role !== "admin"
        && !confirm(`Make yourself "${role}"? You lose this page.`)) {
        select.value = u.role;
        return;
      }
      if (role === "disabled" && !confirm(`Disable ${u.email}? Their sessions end and their tokens stop.`)) {
        select.value = u.role;
        return;
      }
      try {
        const changed = await api(`/api/v1/admin/users/${enc(u.email)}`, { method: "PUT", json: { role } });
        u.role = changed.role;
        notify(`${u.email} is now ${changed.role}.`, "ok");
      } catch (e) {
        select.value = u.role;
        throw e;
      }
    }));
    return h("tr", { dataset: { email: u.email, role: u.role } },
      cell("E-mail", u.email, u.email === who.email ? h("span", { class: "muted" }, " (you)") : null),
      cell("Role", select),
      cell("Added", timeEl(u.created_at)));
  };
  const refreshUsers = async () => {
    users = await api("/api/v1/admin/users");
    usersBody.replaceChildren(...users.map(userRow));
    if (!users.length) {
      usersBody.append(h("tr", { class: "empty" }, h("td", { colspan: 3, class: "muted" },
        "No users yet: add one below, or they are added when they first log in.")));
    }
    userList.replaceChildren(...users.map((u) => h("option", { value: u.email })));
  };

  const newEmail = h("input", { type: "email", id: "user-email", name: "email", required: true,
    autocomplete: "off", placeholder: "ana@example.com" });
  const newRole = h("select", { id: "user-role", name: "role" },
    h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin"));
  const userForm = h("form", { id: "user-add", class: "inline-form", "aria-label": "Add a user" },
    field("E-mail", newEmail), field("Role", newRole),
    h("button", { type: "submit" }, "Add user"));
  userForm.addEventListener("submit", guarded(async (event) => {
    event.preventDefault();
    if (!newEmail.value.trim()) {
      newEmail.focus();
      return;
    }
    const added = await api("/api/v1/admin/users", { method: "POST",
      json: { email: newEmail.value.trim(), role: newRole.value } });
    notify(`${added.email} added as ${added.role}.`, "ok");
    userForm.reset();
    await refreshUsers();
  }));

  // ---- Tokens ------------------------------------------------------------------------
  const tokensBody = h("tbody", {});
  const tokensTable = h("table", { id: "tokens", class: "stack" },
    h("caption", { class: "visually-hidden" }, "API tokens"),
    head("Name", "User", "Starts with", "Scopes", "Created", "Last used", "Expires", "State", "Actions"), tokensBody);
  const tokenRow = (t) => {
    const expired = t.expires_at && new Date(t.expires_at).getTime() < Date.now();
    const state = t.revoked ? "revoked" : expired ? "expired" : "active";
    return h("tr", { dataset: { tokenId: t.id, revoked: String(t.revoked) } },
      cell("Name", t.name || none()),
      cell("User", t.user_email),
      cell("Starts with", h("code", {}, `${t.prefix}…`)),
      cell("Scopes", t.scopes.join(", ")),
      cell("Created", timeEl(t.created_at)),
      cell("Last used", t.last_used_at ? timeEl(t.last_used_at) : h("span", { class: "muted" }, "never")),
      cell("Expires", t.expires_at ? timeEl(t.expires_at) : h("span", { class: "muted" }, "never")),
      cell("State", h("span", { class: `badge ${state === "active" ? "s-completed" : "s-cancelled"}` }, state)),
      cell("Actions", t.revoked ? null : h("button", {
        type: "button", class: "revoke danger", "aria-label": `Revoke ${t.name || t.prefix} of ${t.user_email}`,
        onclick: guarded(async () => {
          if (!confirm(`Revoke the token ${t.name ? `"${t.name}" ` : ""}(${t.prefix}…) of ${t.user_email}? `
            + "Whatever uses it is refused from now on.")) return;
          await api(`/api/v1/admin/tokens/${enc(t.id)}`, { method: "DELETE" });
          notify("Token revoked.", "ok");
          await refreshTokens();
        }),
      }, "Revoke")),
    );
  };
  const refreshTokens = async () => {
    const tokens = await api("/api/v1/admin/tokens");
    tokensBody.replaceChildren(...tokens.map(tokenRow));
    if (!tokens.length) {
      tokensBody.append(h("tr", { class: "empty" }, h("td", { colspan: 9, class: "muted" }, "No tokens yet.")));
    }
  };

  const tokenUser = h("input", { type: "email", id: "token-user", name: "user", required: true,
    list: "user-emails", autocomplete: "off", value: who.auth_enabled ? who.email : "" });
  const tokenName = h("input", { id: "token-name", name: "name", autocomplete: "off", placeholder: "ci" });
  const tokenDays = h("input", { id: "token-days", name: "expires_days", type: "number", min: 1, step: 1,
    inputmode: "numeric", placeholder: "never" });
  const scopeBoxes = SCOPES.map((s) => h("input", { type: "checkbox", name: "scopes", value: s,
    id: `token-scope-${s}`, checked: s !== "admin" }));
  const newToken = h("section", { id: "new-token", class: "card notice warn", hidden: true,
    "aria-labelledby": "new-token-title" });
  const tokenForm = h("form", { id: "token-create", class: "card", "aria-labelledby": "token-create-title" },
    h("h3", { id: "token-create-title" }, "Create a token"),
    field("For user", tokenUser, "The token acts as this user, with their role."),
    h("fieldset", { class: "scopes" }, h("legend", {}, "Scopes"),
      scopeBoxes.map((box) => h("label", { for: box.id, class: "check" }, box, ` ${box.value}`))),
    field("Name", tokenName, "To recognise it by (optional)."),
    field("Expires after (days)", tokenDays, "Empty: never."),
    h("div", { class: "row" }, h("button", { type: "submit", id: "token-create-submit" }, "Create token")),
  );
  tokenForm.addEventListener("submit", guarded(async (event) => {
    event.preventDefault();
    const scopes = scopeBoxes.filter((b) => b.checked).map((b) => b.value);
    if (!tokenUser.value.trim()) {
      tokenUser.focus();
      return;
    }
    if (!scopes.length) {
      notify("Pick at least one scope.", "error");
      scopeBoxes[0].focus();
      return;
    }
    const body = { user: tokenUser.value.trim(), scopes };
    if (tokenName.value.trim()) body.name = tokenName.value.trim();
    if (tokenDays.value) body.expires_days = Number(tokenDays.value);
    const created = await api("/api/v1/admin/tokens", { method: "POST", json: body });
    showNewToken(created);
    tokenName.value = "";
    tokenDays.value = "";
    await refreshTokens();
  }));

  const showNewToken = (created) => {
    const value = h("input", { id: "new-token-value", readonly: true, value: created.token,
      class: "code", spellcheck: "false", "aria-describedby": "new-token-warning" });
    const copied = h("span", { class: "muted", "aria-live": "polite" });
    const copy = h("button", { type: "button", id: "new-token-copy" }, "Copy");
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(created.token);
      } catch {
        value.select();
        document.execCommand("copy");
      }
      copied.textContent = "Copied.";
    });
    const done = h("button", { type: "button", class: "secondary", id: "new-token-done" }, "I have kept it");
    done.addEventListener("click", () => {
      newToken.hidden = true;
      newToken.replaceChildren();
      tokenForm.querySelector("button[type=submit]").focus();
    });
    newToken.replaceChildren(
      h("h3", { id: "new-token-title" }, `New token for ${created.user_email}`),
      h("p", { id: "new-token-warning", role: "alert" }, h("strong", {}, "Copy it now: it will not be shown again."),
        " Only its hash is kept; if it is lost, revoke it and create another."),
      h("div", { class: "row" }, h("label", { for: "new-token-value", class: "visually-hidden" }, "The new token"),
        value, copy, copied),
      h("p", { class: "hint" }, `Scopes: ${created.scopes.join(", ")}; `,
        created.expires_at ? ["expires ", timeEl(created.expires_at)] : "never expires", "."),
      h("div", { class: "row" }, done),
    );
    newToken.hidden = false;
    value.focus();
    value.select();
  };

  // ---- Workers -----------------------------------------------------------------------
  const workers = h("div", { id: "workers", "aria-describedby": "workers-hint" });
  const workersHint = h("p", { class: "hint", id: "workers-hint" });
  const refreshWorkers = async () => {
    const list = await api("/api/v1/workers");
    workers.dataset.count = String(list.length);
    workers.dataset.updated = new Date().toISOString();
    workersHint.textContent = `Workers that sent a heartbeat in the last minute; refreshed every ${WORKERS_EVERY_MS / 1000} s ` +
      `(last at ${new Date().toLocaleTimeString()}).`;
    if (!list.length) {
      workers.replaceChildren(h("p", { class: "muted" }, "No live worker: start one with `maestro worker`."));
      return;
    }
    workers.replaceChildren(h("div", { class: "table-wrap" }, h("table", { class: "stack" },
      h("caption", { class: "visually-hidden" }, "Live workers"),
      head("Name", "Profile", "Host", "Task classes", "Started", "Heartbeat", "Running"),
      h("tbody", {}, list.map((w) => h("tr", { dataset: { workerId: w.id } },
        cell("Name", w.name),
        cell("Profile", w.profile),
        cell("Host", `${w.host} (pid ${w.pid})`),
        cell("Task classes", w.task_classes.length ? w.task_classes.join(", ") : none()),
        cell("Started", timeEl(w.started_at)),
        cell("Heartbeat", timeEl(w.heartbeat_at)),
        cell("Running", w.running.length
          ? h("ul", { class: "plain" }, w.running.map((id) => h("li", {}, h("a", { href: `/jobs/${enc(id)}` }, id))))
          : h("span", { class: "muted" }, "idle"))),
      )))));
  };
  let workersTimer = null;
  const pollWorkers = () => {
    clearTimeout(workersTimer);
    if (document.visibilityState !== "visible") return;
    refreshWorkers()
      .catch((e) => {
        if (e instanceof ApiError && [401, 403].includes(e.status)) throw e;
        workersHint.textContent = `Could not refresh the workers (${e.message}); trying again.`;
      })
      .then(() => {
        workersTimer = setTimeout(pollWorkers, WORKERS_EVERY_MS);
      })
      .catch(fail);
  };
  document.addEventListener("visibilitychange", pollWorkers);

  // ---- Audit log ---------------------------------------------------------------------
  const auditBody = h("tbody", {});
  const audit = h("table", { id: "audit", class: "stack" },
    h("caption", { class: "visually-hidden" }, "Audit log"),
    head("When", "Who", "What", "Job", "Schedule", "Detail"), auditBody);
  const auditPos = h("span", { class: "muted", id: "audit-page" });
  const cursors = [null]; // the cursor each page shown so far started from (newest first)
  let nextCursor = null;
  const prev = h("button", { type: "button", class: "secondary", id: "audit-prev" }, "← Newer");
  const next = h("button", { type: "button", class: "secondary", id: "audit-next" }, "Older →");
  const showAudit = async () => {
    const page = await api(withQuery("/api/v1/admin/audit",
      { order: "newest", cursor: cursors[cursors.length - 1], limit: AUDIT_PAGE }));
    nextCursor = page.next_cursor;
    auditBody.replaceChildren(...page.entries.map((e) => h("tr", { dataset: { auditId: String(e.id), action: e.action } },
      cell("When", timeEl(e.at)),
      cell("Who", e.actor),
      cell("What", h("code", {}, e.action)),
      cell("Job", e.job_id ? h("a", { href: `/jobs/${enc(e.job_id)}` }, e.job_id) : none()),
      cell("Schedule", e.schedule_id ? h("code", {}, e.schedule_id) : none()),
      cell("Detail", e.detail || none()))));
    if (!page.entries.length) {
      auditBody.append(h("tr", { class: "empty" }, h("td", { colspan: 6, class: "muted" }, "Nothing recorded yet.")));
    }
    prev.disabled = cursors.length === 1;
    next.disabled = nextCursor == null;
    auditPos.textContent = `Page ${cursors.length}, newest first, ${AUDIT_PAGE} a page.`;
  };
  prev.addEventListener("click", guarded(async () => {
    cursors.pop();
    await showAudit();
  }));
  next.addEventListener("click", guarded(async () => {
    if (nextCursor == null) return;
    cursors.push(nextCursor);
    await showAudit();
  }));

  app.replaceChildren(
    h("section", { "aria-labelledby": "users-title" },
      h("h2", { id: "users-title" }, "Users"),
      h("div", { class: "table-wrap" }, usersTable),
      userForm, userList),
    h("section", { "aria-labelledby": "tokens-title" },
      h("h2", { id: "tokens-title" }, "API tokens"),
      newToken,
      h("div", { class: "table-wrap" }, tokensTable),
      tokenForm),
    h("section", { "aria-labelledby": "workers-title" },
      h("h2", { id: "workers-title" }, "Live workers"),
      workersHint, workers),
    h("section", { "aria-labelledby": "audit-title" },
      h("h2", { id: "audit-title" }, "Audit log"),
      h("div", { class: "table-wrap" }, audit),
      h("div", { class: "row pager" }, prev, next, auditPos)),
  );
  await Promise.all([refreshUsers(), refreshTokens(), showAudit()]);
  pollWorkers();
});
