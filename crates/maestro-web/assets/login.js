// /login: why a page needs a login (401), and two ways in: single sign-on (OpenID Connect,
// `/auth/login`), or an API token kept for this tab only.
import { api, ApiError, field, h, setToken, start, withQuery } from "/ui/lib.js";

/** A path on this server to go back to, never another site. */
function nextPath() {
  const next = new URLSearchParams(location.search).get("next") || "/jobs";
  return next.startsWith("/") && !next.startsWith("//") && !next.includes("\\") ? next : "/jobs";
}

start(async () => {
  const app = document.getElementById("app");
  const why = new URLSearchParams(location.search).get("why");
  const next = nextPath();
  const input = h("input", { type: "password", autocomplete: "off", spellcheck: "false", required: true });
  const error = h("p", { class: "notice error", hidden: true, role: "alert" });
  const form = h("form", { class: "card", "aria-labelledby": "with-token" },
    h("h2", { id: "with-token" }, "With an API token"),
    field("Token", input, "From `maestro tokens create` or the admin page. It is kept in this tab only."),
    error,
    h("button", { type: "submit" }, "Use the token"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    try {
      await api("/api/v1/me");
      location.assign(next);
    } catch (e) {
      setToken(null);
      error.hidden = false;
      error.textContent = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e);
      input.focus();
    }
  });
  app.replaceChildren(
    why === "401"
      ? h("p", { class: "notice warn", role: "alert" }, "This page needs you to log in (the server answered 401).")
      : null,
    h("section", { class: "card", "aria-labelledby": "with-sso" },
      h("h2", { id: "with-sso" }, "With single sign-on"),
      h("p", {}, "Log in with your organisation's account (OpenID Connect)."),
      h("a", { class: "button", href: withQuery("/auth/login", { redirect_to: next }) }, "Log in"),
    ),
    form,
  );
});
