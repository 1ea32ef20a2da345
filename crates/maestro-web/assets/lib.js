// What every page shares: the API client, the event-stream reader, a DOM builder that only
// ever creates text (never parses HTML), times in the browser's zone, and the header's
// "who am I". Pages import what they need: `import { api, h } from "/ui/lib.js"`.

// ---------------------------------------------------------------------------------------
// The API

/** An API answer that was not 2xx; `problem` is its application/problem+json body. */
export class ApiError extends Error {
  constructor(status, problem, response) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.response = response;
  }
}

const TOKEN_KEY = "maestro.token";

/** The API token this tab logged in with (`/login`), if any; else the session cookie is used. */
export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Keeps (or forgets, with null) the API token for this tab. */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function cookie(name) {
  for (const pair of document.cookie.split(";")) {
    const [k, ...v] = pair.trim().split("=");
    if (k === name) return decodeURIComponent(v.join("="));
  }
  return null;
}

/** The headers every request carries: the token, or the CSRF token for a cookie write. */
export function authHeaders(method = "GET") {
  const headers = new Headers();
  const t = token();
  if (t) headers.set("Authorization", `Bearer ${t}`);
  else if (!["GET", "HEAD", "OPTIONS"].includes(method)) {
    const csrf = cookie("maestro_csrf");
    if (csrf) headers.set("X-CSRF-Token", csrf);
  }
  return headers;
}

/**
 * Calls the API. `json` is sent as JSON, `body` as is (a FormData, a string with
 * `contentType`). Answers the parsed JSON (or text, or null for 204); `raw: true` answers the
 * Response. Throws ApiError for any status but 2xx.
 */
export async function api(path, options = {}) {
  const { method = "GET", json, contentType, raw = false, signal } = options;
  let { body } = options;
  const headers = authHeaders(method);
  headers.set("Accept", "application/json");
  for (const [k, v] of Object.entries(options.headers || {})) headers.set(k, v);
  if (json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(json);
  } else if (contentType) {
    headers.set("Content-Type", contentType);
  }
  const response = await fetch(path, { method, headers, body, signal, credentials: "same-origin" });
  if (!response.ok && !(raw && response.status === 304)) {
    let problem = null;
    try {
      problem = await response.json();
    } catch {
      problem = { status: response.status, detail: response.statusText };
    }
    throw new ApiError(response.status, problem, response);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

/** `/path?k=v…` with the entries of `query` that are set. */
export function withQuery(path, query) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") params.set(k, v);
  }
  const s = params.toString();
  return s ? `${path}?${s}` : path;
}

/** The URL of a job's file, to download (or, with `inline`, to show in the page). */
export function fileUrl(base, path, inline = false) {
  const encoded = path.split("/").map(encodeURIComponent).join("/");
  return `${base}/files/${encoded}${inline ? "?inline=1" : ""}`;
}

// ---------------------------------------------------------------------------------------
// Failing well

/** Shows a message in the page's live region (`kind`: info, ok, error). */
export function notify(message, kind = "info") {
  const status = document.getElementById("status");
  if (!status) return;
  status.replaceChildren(
    h("p", { class: `notice ${kind}` }, message, " ",
      h("button", { type: "button", class: "link", onclick: () => status.replaceChildren() }, "Dismiss")),
  );
}

/**
 * What a page does with an error it did not handle itself: 401 goes to the login page (and
 * back here after), 403 says what is missing, anything else is shown with the server's detail.
 */
export function fail(error) {
  if (error instanceof ApiError && error.status === 401) {
    const next = location.pathname + location.search;
    location.assign(withQuery("/login", { next, why: "401" }));
    return;
  }
  if (error instanceof ApiError && error.status === 403) {
    const app = document.getElementById("app");
    document.getElementById("title").textContent = "Not allowed";
    app.replaceChildren(
      h("section", { class: "card", "aria-labelledby": "forbidden" },
        h("h2", { id: "forbidden" }, "You may not see or do this"),
        h("p", {}, error.message),
        h("p", {}, "Ask an admin for the role or scope it needs, or ",
          h("a", { href: withQuery("/login", { next: location.pathname }) }, "log in as someone else"), "."),
      ),
    );
    return;
  }
  console.error(error);
  notify(error instanceof ApiError ? `${error.status}: ${error.message}` : String(error.message || error), "error");
}

/** Runs the page's `main`, routing any failure to `fail`. */
export function start(main) {
  const go = () => Promise.resolve().then(main).catch(fail);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
  else go();
}

// ---------------------------------------------------------------------------------------
// The DOM, from text only

/**
 * Creates an element. `attrs`: `class`, `dataset`, `on<event>` handlers, booleans, and other
 * attributes as text; `children`: nodes, strings (as text, never HTML), arrays, null.
 */
export function h(tag, attrs, ...children) {
  const el = tag.includes(":")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(tag.indexOf(":") + 1))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) {
      // Handlers are functions of this code; an attribute handler would be a string of script.
      if (typeof v !== "function") throw new TypeError(`${k} must be a function`);
      el.addEventListener(k.slice(2), v);
    }
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "class" && !(el instanceof SVGElement)) el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

/** An SVG element (`svg("rect", {...})`). */
export function svg(tag, attrs, ...children) {
  return h(`svg:${tag}`, attrs, ...children);
}

/** Appends children as `h` does. */
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/**
 * Puts HTML that the server sanitised (a job's result rendered from Markdown, `result.html`)
 * into `el`: the one place a page inserts HTML. Links open in a new tab without a referrer.
 */
export function sanitisedHtml(el, html) {
  el.innerHTML = html;
  for (const a of el.querySelectorAll("a[href]")) {
    a.setAttribute("target", "_blank");
    a.setAttribute("rel", "noopener noreferrer nofollow");
  }
  return el;
}

/** A labelled form field: `field("Task", h("textarea", {...}))`. */
export function field(label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  const hintId = hint ? `${id}-hint` : null;
  if (hintId) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" },
    h("label", { for: id }, label),
    control,
    hint ? h("p", { class: "hint", id: hintId }, hint) : null,
  );
}

/** A status badge (`completed`, `waiting_input`, …). */
export function badge(status) {
  return h("span", { class: `badge s-${status}`, dataset: { status } }, status.replace(/_/g, " "));
}

// ---------------------------------------------------------------------------------------
// Times, sizes and numbers, in the browser's zone and language

const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const dtf = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

/** "3 minutes ago" for an RFC 3339 time. */
export function relative(iso, now = Date.now()) {
  const s = Math.round((new Date(iso).getTime() - now) / 1000);
  const abs = Math.abs(s);
  if (abs < 45) return rtf.format(s, "second");
  if (abs < 2700) return rtf.format(Math.round(s / 60), "minute");
  if (abs < 79200) return rtf.format(Math.round(s / 3600), "hour");
  if (abs < 2592000) return rtf.format(Math.round(s / 86400), "day");
  return dtf.format(new Date(iso));
}

/** The time in the browser's zone, e.g. "25 Nov 2026, 14:03:11". */
export function localTime(iso) {
  return iso ? dtf.format(new Date(iso)) : "";
}

/** A `<time>` showing the relative age, the local time as its title; kept fresh. */
export function timeEl(iso) {
  if (!iso) return h("span", {}, "–");
  return h("time", { datetime: iso, title: localTime(iso), dataset: { rel: "" } }, relative(iso));
}

setInterval(() => {
  for (const t of document.querySelectorAll("time[data-rel]")) {
    t.textContent = relative(t.getAttribute("datetime"));
  }
}, 30000);

/** "1 m 05 s" for milliseconds. */
export function duration(ms) {
  if (ms == null || Number.isNaN(ms)) return "–";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} m`;
}

const nf = new Intl.NumberFormat();
/** 12,345 */
export function num(n) {
  return nf.format(n || 0);
}

/** "1.2 MB" */
export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** Total tokens of a `usage` object. */
export function tokens(usage) {
  if (!usage) return 0;
  return usage.total_tokens ?? (usage.prompt_tokens || 0) + (usage.completion_tokens || 0);
}

/** What a job is called: its title, else the first line of its task. */
export function jobName(job) {
  const first = (job.title || job.task || "").split("\n")[0].trim();
  return first.length > 120 ? `${first.slice(0, 117)}…` : first || job.id;
}

/** Statuses a job does not leave. */
export const FINAL = new Set(["completed", "aborted", "exceeded", "failed", "cancelled"]);

// ---------------------------------------------------------------------------------------
// The event stream

/**
 * Follows a job's Server-Sent Events at `url` (the API's or a share link's), after `after`.
 * Read with fetch, so that the token goes in a header; a dropped connection (sleep, network,
 * a server that closes it) is resumed with `Last-Event-ID`, so nothing is missed or repeated.
 * Handlers: onEvent(record) for recorded events (each once, in `seq` order), onStatus(status),
 * onDelta({movement, text}), onResync({last_seq}), onConnection("live" | "reconnecting" |
 * "ended"). Returns { stop() }.
 */
export function follow(url, handlers, after = 0) {
  let last = after;
  let stopped = false;
  let finalSeen = false;
  let controller = null;
  let retry = 0;
  let wake = null;
  const conn = (s) => handlers.onConnection && handlers.onConnection(s);

  const dispatch = (type, id, data) => {
    let value;
    try {
      value = JSON.parse(data);
    } catch {
      return;
    }
    if (id !== null) {
      const seq = Number(id);
      if (seq <= last) return;
      last = seq;
      handlers.onEvent && handlers.onEvent(value);
      return;
    }
    if (type === "status") {
      if (FINAL.has(value.status)) finalSeen = true;
      handlers.onStatus && handlers.onStatus(value.status);
    } else if (type === "text_delta") {
      handlers.onDelta && handlers.onDelta(value);
    } else if (type === "resync") {
      handlers.onResync && handlers.onResync(value);
    }
  };

  const once = async () => {
    controller = new AbortController();
    const headers = authHeaders("GET");
    headers.set("Accept", "text/event-stream");
    if (last > 0) headers.set("Last-Event-ID", String(last));
    const response = await fetch(url, { headers, signal: controller.signal, credentials: "same-origin" });
    if (!response.ok) {
      let problem = null;
      try {
        problem = await response.json();
      } catch {
        problem = null;
      }
      throw new ApiError(response.status, problem, response);
    }
    retry = 0;
    conn("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let type = "message";
    let id = null;
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let nl;
      while ((nl = buffer.search(/\r\n|\n|\r/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (data.length) dispatch(type, id, data.join("\n"));
          type = "message";
          id = null;
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          let v = colon < 0 ? "" : line.slice(colon + 1);
          if (v.startsWith(" ")) v = v.slice(1);
          if (name === "data") data.push(v);
          else if (name === "event") type = v;
          else if (name === "id") id = v;
        }
      }
    }
  };

  const loop = async () => {
    while (!stopped) {
      try {
        await once();
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && [401, 403, 404].includes(error.status)) {
          conn("ended");
          handlers.onError ? handlers.onError(error) : fail(error);
          return;
        }
      }
      if (stopped) return;
      if (finalSeen) {
        conn("ended");
        return;
      }
      conn("reconnecting");
      retry = Math.min(retry + 1, 6);
      const delay = Math.min(250 * 2 ** (retry - 1), 8000);
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, delay);
      });
      wake = null;
    }
  };

  // Back from sleep or offline: try again now rather than at the end of the back-off.
  const nudge = () => wake && wake();
  window.addEventListener("online", nudge);
  document.addEventListener("visibilitychange", nudge);
  loop();
  return {
    stop() {
      stopped = true;
      if (controller) controller.abort();
      window.removeEventListener("online", nudge);
      document.removeEventListener("visibilitychange", nudge);
    },
    get last() {
      return last;
    },
  };
}

// ---------------------------------------------------------------------------------------
// Who am I (the header)

let meCache = null;
/** `/api/v1/me`, once per page. */
export function me() {
  meCache = meCache || api("/api/v1/me");
  return meCache;
}

async function whoami() {
  const slot = document.getElementById("whoami");
  if (!slot) return;
  try {
    const who = await me();
    const out = async () => {
      setToken(null);
      try {
        await api("/auth/logout", { method: "POST" });
      } catch {
        // Already logged out.
      }
      location.assign("/login");
    };
    slot.replaceChildren(h("span", { class: "who", title: `role: ${who.role}` },
      who.auth_enabled ? who.email : "local (no auth)"));
    if (who.auth_enabled) slot.append(h("button", { type: "button", class: "link", onclick: out }, "Log out"));
    if (who.role !== "admin") {
      for (const a of document.querySelectorAll('nav a[href="/admin"], nav a[href="/config"]')) {
        a.parentElement.hidden = true;
      }
    }
  } catch (error) {
    fail(error);
  }
}

if (document.getElementById("whoami")) start(whoami);
