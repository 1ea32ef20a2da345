// `/`: submit a task. Pick a piece (or "auto"), write the task, attach files; Enter submits
// (Shift+Enter is a new line), and the job's page opens.
import { api, field, h, notify, start } from "/ui/lib.js";

start(async () => {
  const app = document.getElementById("app");
  const pieces = await api("/api/v1/pieces");
  const described = new Map(pieces.map((p) => [p.name, p.description]));
  described.set("auto", "Let the worker choose the piece that fits the task.");
  const select = h("select", { name: "piece", id: "piece" },
    h("option", { value: "auto" }, "auto"),
    pieces.map((p) => h("option", { value: p.name }, p.name)),
  );
  const remembered = localStorage.getItem("maestro.piece");
  if (remembered && described.has(remembered)) select.value = remembered;
  const about = h("p", { class: "hint", id: "piece-about", "aria-live": "polite" });
  const describe = () => {
    about.textContent = described.get(select.value) || "";
  };
  select.addEventListener("change", describe);
  describe();
  const task = h("textarea", { name: "task", id: "task", rows: 6, required: true,
    placeholder: "What should the agents do?" });
  const files = h("input", { type: "file", name: "files", id: "files", multiple: true });
  const button = h("button", { type: "submit", id: "submit" }, "Submit");
  const form = h("form", { class: "card", id: "submit-form" },
    h("div", { class: "field" }, h("label", { for: "piece" }, "Piece"), select, about),
    field("Task", task, "Enter submits; Shift+Enter starts a new line."),
    field("Files", files, "They are in the run's input/ directory."),
    h("div", { class: "row" }, button),
  );
  task.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!task.value.trim()) {
      notify("Write the task first.", "error");
      task.focus();
      return;
    }
    button.disabled = true;
    try {
      let job;
      if (files.files.length) {
        const body = new FormData();
        body.set("piece", select.value);
        body.set("task", task.value);
        for (const f of files.files) body.append("files", f, f.name);
        job = await api("/api/v1/jobs", { method: "POST", body });
      } else {
        job = await api("/api/v1/jobs", { method: "POST", json: { piece: select.value, task: task.value } });
      }
      localStorage.setItem("maestro.piece", select.value);
      location.assign(`/jobs/${job.id}`);
    } catch (e) {
      button.disabled = false;
      throw e;
    }
  });
  app.replaceChildren(form);
  task.focus();
});
