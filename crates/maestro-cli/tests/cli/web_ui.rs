//! The web UI in a real Chromium (Debian's, driven over WebDriver by `maestro_testkit::Browser`)
//! against a real `maestro serve` on 127.0.0.1 with a scripted model. Each flow runs at a
//! desktop and at a phone viewport, and saves screenshots of its steps under
//! `target/web-screenshots/<flow>-<viewport>/`. The element ids the tests rely on are the
//! pages' contract (`docs/web.md`).
//!
//! - submit with a file, watch the run live, answer its question, see the result, download the
//!   output;
//! - the stream survives the server ending it mid-run (`--max-stream-secs`): no event missing
//!   or shown twice;
//! - the piece editor shows a diagnostic at its line, and draws one node per movement of a takt
//!   builtin;
//! - a share link shows the job to a logged-out browser until it is revoked;
//! - a configuration conflict (412) is shown and resolved;
//! - a model's answer with `<script>`, `<img onerror>` and a `javascript:` link runs nothing,
//!   on the job page and on the share page;
//! - axe-core finds no serious or critical violation on the main pages;
//! - a 401 shows the login page, a 403 the "Not allowed" page.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_testkit::{Browser, ScriptedLlm, Turn, Viewport, listen_loopback};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete, stderr};
use support::serve::Served;

/// How long a step may take to show (a loaded machine, a debug build).
const WAIT: Duration = Duration::from_secs(30);

/// Runs a flow at both viewports, as two tests: `FLOW::desktop` and `FLOW::phone`.
macro_rules! at_both_sizes {
    ($flow:ident) => {
        mod $flow {
            use maestro_testkit::Viewport;

            #[tokio::test(flavor = "multi_thread")]
            #[cfg_attr(no_chromium, ignore = "needs chromium, chromium-driver and axe-core")]
            async fn desktop() {
                super::$flow(Viewport::Desktop).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            #[cfg_attr(no_chromium, ignore = "needs chromium, chromium-driver and axe-core")]
            async fn phone() {
                super::$flow(Viewport::Phone).await;
            }
        }
    };
}

at_both_sizes!(submit_watch_answer_download);
at_both_sizes!(stream_survives_server_disconnects);
at_both_sizes!(editor_diagnostics_and_diagram);
at_both_sizes!(share_link_until_revoked);
at_both_sizes!(config_conflict_resolved);
at_both_sizes!(model_output_runs_no_script);
at_both_sizes!(no_serious_accessibility_violation);
at_both_sizes!(unauthorised_and_forbidden_pages);

// ---------------------------------------------------------------------------------------------
// Support

async fn browser(flow: &str, viewport: Viewport) -> Browser {
    Browser::start(&format!("{flow}-{}", viewport.name()), viewport)
        .await
        .unwrap()
}

/// A piece that reads its inputs and writes its outputs.
const FILES_PIECE: &str = "\
name: files
description: reads its inputs and leaves outputs
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You work with files.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

fn ask(question: &str) -> Turn {
    Turn::tool_call(
        "complete",
        json!({"status": "needs_user_input", "result": question}),
    )
}

/// A project with auth on, `root@example.test` an admin.
fn auth_project() -> Project {
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\nauth:\n  enabled: true\n  admins: [root@example.test]\n",
    )
    .unwrap();
    project
}

async fn user_with_token(project: &Project, email: &str, admin: bool, scopes: &str) -> String {
    let mut add = vec!["users", "add", email];
    if admin {
        add.push("--admin");
    }
    let out = project.maestro(&add).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = project
        .maestro(&[
            "tokens", "create", "--user", email, "--scopes", scopes, "--json",
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    created["token"].as_str().unwrap().to_string()
}

/// An API call with an optional token: status and body (JSON, or the text).
async fn call(
    served: &Served,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = served.http.request(method, served.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn submit(served: &Served, token: Option<&str>, piece: &str, task: &str) -> String {
    let (status, job) = call(
        served,
        reqwest::Method::POST,
        "/api/v1/jobs",
        token,
        Some(json!({"piece": piece, "task": task})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// Polls the job until `done` holds (at most [`WAIT`]).
async fn until(served: &Served, token: Option<&str>, id: &str, done: impl Fn(&Value) -> bool) {
    let started = std::time::Instant::now();
    loop {
        let (status, job) = call(
            served,
            reqwest::Method::GET,
            &format!("/api/v1/jobs/{id}"),
            token,
            None,
        )
        .await;
        assert_eq!(status, 200, "{job}");
        if done(&job) {
            return;
        }
        assert!(started.elapsed() < WAIT, "the job never got there: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `seq` of every event the job's log holds.
async fn logged_seqs(served: &Served, token: Option<&str>, path: &str) -> Vec<i64> {
    let mut request = served.http.get(served.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let text = request.send().await.unwrap().text().await.unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// The `data-seq` of every element of the page's timeline, in document order.
async fn page_seqs(browser: &Browser) -> Vec<i64> {
    let seqs = browser
        .execute(
            "return [...document.querySelectorAll('#timeline [data-seq]')]
               .map((e) => Number(e.dataset.seq));",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(seqs).unwrap()
}

/// The page shows every event of the log exactly once.
async fn assert_timeline_is_the_log(browser: &Browser, logged: &[i64]) {
    // The last events may still be on their way to the page.
    let last = logged.last().copied().unwrap_or(0);
    browser
        .wait_for(&format!("#timeline [data-seq=\"{last}\"]"), WAIT)
        .await
        .unwrap();
    let shown = page_seqs(browser).await;
    let unique: BTreeSet<i64> = shown.iter().copied().collect();
    assert_eq!(shown.len(), unique.len(), "an event shown twice: {shown:?}");
    let expected: BTreeSet<i64> = logged.iter().copied().collect();
    assert_eq!(unique, expected, "the page's events are not the log's");
}

/// Stores the token as the login page does (this tab only), on a page of the server.
async fn log_in(browser: &Browser, served: &Served, token: &str) {
    browser.goto(&served.url("/login")).await.unwrap();
    browser
        .execute(
            "sessionStorage.setItem('maestro.token', arguments[0]);",
            vec![json!(token)],
        )
        .await
        .unwrap();
}

async fn log_out(browser: &Browser) {
    browser
        .execute("sessionStorage.clear(); localStorage.clear();", vec![])
        .await
        .unwrap();
}

/// A listener on 127.0.0.1 that records every request it gets: a page that runs a script of a
/// job would reach it.
struct Tripwire {
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Tripwire {
    async fn start() -> Tripwire {
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&hits);
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push(uri.to_string());
                "tripped"
            }
        });
        let listener = listen_loopback().unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Tripwire { port, hits }
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------------------------------------
// a. Submit with a file, watch it live, answer, see the result, download the output.

async fn submit_watch_answer_download(viewport: Viewport) {
    let report = "# Report\n\nThe notes, **summarised**.\n";
    let slow = |turn: Turn| turn.with_delay(Duration::from_millis(400));
    let llm = ScriptedLlm::start([
        slow(Turn::tool_call(
            "Read",
            json!({"file_path": "input/notes.txt"}),
        )),
        slow(ask("Which format do you want, Markdown or plain text?")),
        slow(Turn::tool_call(
            "Write",
            json!({"file_path": "output/report.md", "content": report}),
        )),
        slow(complete("The report is in **output/report.md**.")),
    ])
    .await;
    let project = Project::new();
    std::fs::write(project.path().join("pieces/files.yaml"), FILES_PIECE).unwrap();
    let served = project.serve(&llm.base_url(), &[]);
    let browser = browser("submit_watch_answer_download", viewport).await;
    let notes = project.path().join("notes.txt");
    std::fs::write(&notes, "the notes to summarise\n").unwrap();

    browser.goto(&served.url("/")).await.unwrap();
    browser
        .wait_for("#piece option[value=\"files\"]", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#piece", WAIT)
        .await
        .unwrap()
        .select_by_value("files")
        .await
        .unwrap();
    browser
        .type_into("#task", "Summarise input/notes.txt", WAIT)
        .await
        .unwrap();
    browser
        .type_into("#files", notes.to_str().unwrap(), WAIT)
        .await
        .unwrap();
    browser.screenshot("1-submit").await.unwrap();
    browser.click("#submit", WAIT).await.unwrap();
    let url = browser
        .wait_for_url("the job page", |u| u.contains("/jobs/"), WAIT)
        .await
        .unwrap();
    let id = url.rsplit('/').next().unwrap().to_string();
    assert_eq!(id.len(), 36, "{url}");

    // Events arrive while the job runs: the read of the upload shows before the question.
    browser
        .wait_for("#timeline .ev.tool[data-tool=\"Read\"]", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#conn[data-state=\"live\"]", WAIT)
        .await
        .unwrap();
    browser.screenshot("2-live").await.unwrap();
    let question = browser.text("#question-text", WAIT).await.unwrap();
    assert!(question.contains("Which format"), "{question}");
    browser
        .wait_for("#job-status .badge[data-status=\"waiting_input\"]", WAIT)
        .await
        .unwrap();
    browser.screenshot("3-question").await.unwrap();
    browser
        .type_into("#answer", "Markdown", WAIT)
        .await
        .unwrap();
    browser.click("#answer-send", WAIT).await.unwrap();

    // The page follows the resumed job to its end.
    browser
        .wait_for("#job-status .badge[data-status=\"completed\"]", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#timeline .ev.tool[data-tool=\"Write\"]", WAIT)
        .await
        .unwrap();
    let result = browser.text("#result", WAIT).await.unwrap();
    assert!(result.contains("output/report.md"), "{result}");
    assert!(
        browser.exists("#result strong").await.unwrap(),
        "the result is rendered Markdown"
    );
    let logged = logged_seqs(
        &served,
        None,
        &format!("/api/v1/jobs/{id}/events?format=jsonl"),
    )
    .await;
    assert_timeline_is_the_log(&browser, &logged).await;
    // The answer went to the job.
    assert!(
        llm.requests()
            .last()
            .unwrap()
            .to_string()
            .contains("Markdown"),
        "the model did not see the answer"
    );
    browser
        .wait_for("#files li[data-path=\"report.md\"] a.download", WAIT)
        .await
        .unwrap();
    browser.screenshot("4-result").await.unwrap();
    if viewport == Viewport::Desktop {
        // The README's picture of the job page.
        browser
            .execute("window.scrollTo(0, 0);", vec![])
            .await
            .unwrap();
        browser.screenshot("job-page").await.unwrap();
    }
    browser
        .click("#files li[data-path=\"report.md\"] a.download", WAIT)
        .await
        .unwrap();
    let downloaded = browser.download("report.md", WAIT).await.unwrap();
    assert_eq!(String::from_utf8(downloaded).unwrap(), report);
    assert_eq!(browser.alert_present().await.unwrap(), None);
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// b. The server ends the stream every second; the page resumes with no gap and no duplicate.

async fn stream_survives_server_disconnects(viewport: Viewport) {
    let mut turns = Vec::new();
    for n in 0..20 {
        turns.push(
            Turn::tool_call("Read", json!({"file_path": format!("missing-{n}.txt")}))
                .with_delay(Duration::from_millis(200)),
        );
    }
    turns.push(complete("Read them all."));
    let llm = ScriptedLlm::start(turns).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &["--max-stream-secs", "1"]);
    let browser = browser("stream_survives_server_disconnects", viewport).await;
    let id = submit(&served, None, "one", "read many files").await;
    browser
        .goto(&served.url(&format!("/jobs/{id}")))
        .await
        .unwrap();
    browser
        .wait_for("#timeline [data-seq]", WAIT)
        .await
        .unwrap();
    browser.screenshot("1-running").await.unwrap();
    browser
        .wait_for("#job-status .badge[data-status=\"completed\"]", WAIT)
        .await
        .unwrap();
    let logged = logged_seqs(
        &served,
        None,
        &format!("/api/v1/jobs/{id}/events?format=jsonl"),
    )
    .await;
    assert!(logged.len() > 40, "a long run: {} events", logged.len());
    assert_timeline_is_the_log(&browser, &logged).await;
    // The page did reconnect: it opened the stream more than once.
    let streams = browser
        .execute(
            "return performance.getEntriesByType('resource')
               .filter((e) => e.name.includes('/events')).length;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        streams.as_u64().unwrap() >= 2,
        "the page opened the stream {streams} times"
    );
    browser.screenshot("2-completed").await.unwrap();
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// c. The editor: a diagnostic at its line, and one diagram node per movement of a takt builtin.

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

/// The movements of a piece file and the parallel movements' sub-movements (`- name:` at the
/// movements' indentation and at the one of `parallel:`'s items), in order.
fn movement_names(yaml: &str) -> (Vec<String>, Vec<String>) {
    let mut top = Vec::new();
    let mut sub = Vec::new();
    let mut in_movements = false;
    for line in yaml.lines() {
        if line.starts_with("movements:") {
            in_movements = true;
            continue;
        }
        if in_movements && !line.starts_with(' ') && !line.is_empty() {
            in_movements = false;
        }
        if !in_movements {
            continue;
        }
        if let Some(name) = line.strip_prefix("  - name: ") {
            top.push(name.trim().to_string());
        } else if let Some(name) = line.strip_prefix("      - name: ") {
            sub.push(name.trim().to_string());
        }
    }
    (top, sub)
}

async fn editor_diagnostics_and_diagram(viewport: Viewport) {
    let builtin = fixtures().join("takt-v0.30/builtins/en/pieces/default.yaml");
    let yaml = std::fs::read_to_string(&builtin).unwrap();
    let (movements, parallel) = movement_names(&yaml);
    assert!(
        movements.len() >= 5 && !parallel.is_empty(),
        "{movements:?}"
    );
    let project = Project::new();
    std::fs::write(project.path().join("pieces/default.yaml"), &yaml).unwrap();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let browser = browser("editor_diagnostics_and_diagram", viewport).await;

    browser.goto(&served.url("/pieces")).await.unwrap();
    browser
        .wait_for("table#pieces tr[data-piece=\"default\"]", WAIT)
        .await
        .unwrap();
    browser.screenshot("1-pieces").await.unwrap();
    browser.goto(&served.url("/pieces/default")).await.unwrap();
    browser.wait_for("#diagram svg g.node", WAIT).await.unwrap();
    browser.screenshot("2-diagram").await.unwrap();
    let drawn = browser
        .execute(
            "return [...document.querySelectorAll('#diagram svg g.node[data-movement]')]
               .map((g) => [g.dataset.movement, g.dataset.parent || null]);",
            vec![],
        )
        .await
        .unwrap();
    let drawn: Vec<(String, Option<String>)> = serde_json::from_value(drawn).unwrap();
    let names: Vec<&str> = drawn.iter().map(|(n, _)| n.as_str()).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(
        names.len(),
        unique.len(),
        "a movement drawn twice: {names:?}"
    );
    let expected: BTreeSet<&str> = movements
        .iter()
        .chain(&parallel)
        .map(String::as_str)
        .collect();
    assert_eq!(unique, expected, "one node per movement and sub-movement");
    for (name, parent) in &drawn {
        assert_eq!(
            parent.is_some(),
            parallel.contains(name),
            "{name}: data-parent {parent:?}"
        );
    }
    assert!(
        browser
            .exists("#diagram svg g.node.special[data-target=\"COMPLETE\"]")
            .await
            .unwrap()
    );
    assert!(
        browser
            .exists("#diagram svg g.edge[data-from][data-to]")
            .await
            .unwrap()
    );

    // A transition to a movement that does not exist: the diagnostic names its line.
    let (bad_line, _) = yaml
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with("next: ") && !l.contains("COMPLETE"))
        .unwrap();
    let mut lines: Vec<String> = yaml.lines().map(str::to_string).collect();
    let indent = lines[bad_line].len() - lines[bad_line].trim_start().len();
    lines[bad_line] = format!("{}next: nowhere_at_all", " ".repeat(indent));
    let broken = lines.join("\n") + "\n";
    let line_no = bad_line + 1;
    browser
        .execute(
            "const t = document.getElementById('yaml');
             t.value = arguments[0];
             t.dispatchEvent(new Event('input', { bubbles: true }));",
            vec![json!(broken)],
        )
        .await
        .unwrap();
    let diagnostic = format!("ul#diagnostics li[data-line=\"{line_no}\"]");
    browser.wait_for(&diagnostic, WAIT).await.unwrap();
    let text = browser.text(&diagnostic, WAIT).await.unwrap();
    assert!(text.contains("nowhere_at_all"), "{text}");
    browser
        .wait_for(&format!("#gutter .bad[data-line=\"{line_no}\"]"), WAIT)
        .await
        .unwrap();
    browser.screenshot("3-diagnostic").await.unwrap();
    // Clicking it puts the cursor on that line.
    browser.click(&diagnostic, WAIT).await.unwrap();
    let cursor_line = browser
        .execute(
            "const t = document.getElementById('yaml');
             return t.value.slice(0, t.selectionStart).split('\\n').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(cursor_line, json!(line_no));
    assert_eq!(browser.alert_present().await.unwrap(), None);
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// d. A share link shows the job to a logged-out browser, until it is revoked.

async fn share_link_until_revoked(viewport: Viewport) {
    let llm = ScriptedLlm::start([complete("Shared **result**.")]).await;
    let project = auth_project();
    let alice = user_with_token(&project, "alice@example.test", false, "read,write").await;
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, Some(&alice), "one", "Something to share").await;
    until(&served, Some(&alice), &id, |j| j["status"] == "completed").await;
    let browser = browser("share_link_until_revoked", viewport).await;

    log_in(&browser, &served, &alice).await;
    browser
        .goto(&served.url(&format!("/jobs/{id}")))
        .await
        .unwrap();
    browser
        .wait_for("#job-status .badge[data-status=\"completed\"]", WAIT)
        .await
        .unwrap();
    browser.click("#share", WAIT).await.unwrap();
    browser
        .wait_until(
            "the share link",
            "(document.getElementById('share-url') || {}).value",
            WAIT,
        )
        .await
        .unwrap();
    let link = browser
        .execute("return document.getElementById('share-url').value;", vec![])
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        link.starts_with(&served.url("/share/")),
        "a full URL: {link}"
    );
    browser
        .wait_for("#shares button.revoke[data-share-id]", WAIT)
        .await
        .unwrap();
    browser.screenshot("1-shared").await.unwrap();

    // Logged out: the link shows the job, read-only.
    log_out(&browser).await;
    browser.goto(&link).await.unwrap();
    browser
        .wait_for("#job-status .badge[data-status=\"completed\"]", WAIT)
        .await
        .unwrap();
    let result = browser.text("#result", WAIT).await.unwrap();
    assert!(result.contains("Shared result"), "{result}");
    for control in ["#answer-form", "#cancel", "#share", "#shares button.revoke"] {
        assert!(
            !browser.exists(control).await.unwrap(),
            "{control} on the share page"
        );
    }
    let logged = logged_seqs(
        &served,
        Some(&alice),
        &format!("/api/v1/jobs/{id}/events?format=jsonl"),
    )
    .await;
    assert_timeline_is_the_log(&browser, &logged).await;
    browser.screenshot("2-logged-out").await.unwrap();
    // The job's own page is not for a logged-out browser.
    browser
        .goto(&served.url(&format!("/jobs/{id}")))
        .await
        .unwrap();
    browser
        .wait_for_url("the login page", |u| u.contains("/login"), WAIT)
        .await
        .unwrap();

    // Revoked, it shows nothing of the job.
    log_in(&browser, &served, &alice).await;
    browser
        .goto(&served.url(&format!("/jobs/{id}")))
        .await
        .unwrap();
    browser
        .click("#shares button.revoke[data-share-id]", WAIT)
        .await
        .unwrap();
    browser
        .wait_until(
            "the link revoked",
            "!document.querySelector('#shares button.revoke')",
            WAIT,
        )
        .await
        .unwrap();
    let (_, shares) = call(
        &served,
        reqwest::Method::GET,
        &format!("/api/v1/jobs/{id}/shares"),
        Some(&alice),
        None,
    )
    .await;
    let live = shares
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|s| {
                    s["revoked_at"].is_null() && s.get("revoked").is_none_or(|r| r == false)
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(live, 0, "{shares}");
    log_out(&browser).await;
    browser.goto(&link).await.unwrap();
    browser
        .wait_until(
            "the page to say the link is gone",
            "document.querySelector('#status .notice.error') \
             || document.getElementById('title').textContent.includes('Not found')",
            WAIT,
        )
        .await
        .unwrap();
    assert!(!browser.exists("#job-status .badge").await.unwrap());
    assert!(
        !browser.exists("#result").await.unwrap()
            || browser.text("#result", WAIT).await.unwrap().is_empty()
    );
    browser.screenshot("3-revoked").await.unwrap();
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// e. A configuration conflict (412) is shown and resolved.

async fn config_conflict_resolved(viewport: Viewport) {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let browser = browser("config_conflict_resolved", viewport).await;
    browser.goto(&served.url("/config")).await.unwrap();
    browser
        .wait_until(
            "the configuration in the editor",
            "(document.getElementById('config-editor') || {}).value",
            WAIT,
        )
        .await
        .unwrap();
    browser.screenshot("1-config").await.unwrap();

    // Someone else changes it meanwhile.
    let response = served
        .http
        .get(served.url("/api/v1/config"))
        .send()
        .await
        .unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    let mut theirs: Value = response.json().await.unwrap();
    theirs["llm"]["call_timeout_secs"] = json!(7777);
    let response = served
        .http
        .put(served.url("/api/v1/config"))
        .header("if-match", &etag)
        .json(&theirs)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        200,
        "{}",
        response.text().await.unwrap()
    );

    // The page's edit, on the configuration it read: the tool mode.
    let edited = browser
        .execute(
            "const t = document.getElementById('config-editor');
             const before = t.value;
             // The editor holds the configuration as JSON.
             const doc = JSON.parse(before);
             if (doc.llm.tool_mode !== 'native') return false;
             doc.llm.tool_mode = 'json';
             t.value = JSON.stringify(doc, null, 2);
             t.dispatchEvent(new Event('input', { bubbles: true }));
             return t.value !== before;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(edited, json!(true), "the editor shows tool_mode: native");
    browser.click("#config-save", WAIT).await.unwrap();
    browser.wait_for("#config-conflict", WAIT).await.unwrap();
    let other = browser.text("#config-theirs", WAIT).await.unwrap();
    assert!(
        other.contains("call_timeout_secs"),
        "the other change: {other}"
    );
    browser.screenshot("2-conflict").await.unwrap();
    browser.click("#config-reapply", WAIT).await.unwrap();
    // Both changes are in the configuration of record.
    let started = std::time::Instant::now();
    loop {
        let (_, config) = call(&served, reqwest::Method::GET, "/api/v1/config", None, None).await;
        if config["llm"]["tool_mode"] == "json" {
            assert_eq!(config["llm"]["call_timeout_secs"], 7777, "{config}");
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the reapplied edit never landed: {config}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser
        .wait_until(
            "the conflict to close",
            "!document.getElementById('config-conflict') \
             || document.getElementById('config-conflict').hidden",
            WAIT,
        )
        .await
        .unwrap();
    browser.screenshot("3-resolved").await.unwrap();
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// f. A model's answer with script in it runs nothing, on the job page and the share page.

async fn model_output_runs_no_script(viewport: Viewport) {
    let tripwire = Tripwire::start().await;
    let port = tripwire.port;
    let payload = format!(
        "Here you go.\n\n\
         <script>alert('script-tag'); fetch('http://127.0.0.1:{port}/script-tag')</script>\n\n\
         <img src=\"http://127.0.0.1:{port}/img-src\" onerror=\"alert('img-onerror')\">\n\n\
         <img src=x onerror=\"alert('onerror'); new Image().src='http://127.0.0.1:{port}/onerror'\">\n\n\
         <svg onload=\"alert('svg-onload')\"></svg>\n\n\
         [a link](javascript:alert('javascript-link'))\n\n\
         <a href=\"javascript:fetch('http://127.0.0.1:{port}/a-href')\">another</a>\n"
    );
    let llm = ScriptedLlm::start([
        Turn::tool_call(
            "Read",
            json!({"file_path": format!("<img src=x onerror=\"alert('tool')\">-{port}.txt")}),
        )
        .with_text(payload.clone()),
        complete(&payload),
    ])
    .await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, None, "one", "<script>alert('task')</script>").await;
    until(&served, None, &id, |j| j["status"] == "completed").await;
    let (status, share) = call(
        &served,
        reqwest::Method::POST,
        &format!("/api/v1/jobs/{id}/share"),
        None,
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    let link = share["url"].as_str().unwrap().to_string();
    let link = if link.starts_with("http") {
        link
    } else {
        served.url(&link)
    };
    let browser = browser("model_output_runs_no_script", viewport).await;

    for (step, url) in [("job", served.url(&format!("/jobs/{id}"))), ("share", link)] {
        browser.goto(&url).await.unwrap();
        browser
            .wait_for("#job-status .badge[data-status=\"completed\"]", WAIT)
            .await
            .unwrap();
        let result = browser.text("#result", WAIT).await.unwrap();
        assert!(result.contains("Here you go."), "{step}: {result}");
        // Click every link of the result, the sanitised javascript: ones included.
        let links = browser.find_all("#result a").await.unwrap();
        for a in links {
            let _ = a.click().await;
        }
        // Give anything that would run the time to run.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            browser.alert_present().await.unwrap(),
            None,
            "{step}: a script of the job ran"
        );
        assert_eq!(
            tripwire.hits(),
            Vec::<String>::new(),
            "{step}: the page made a request"
        );
        let scripts = browser
            .execute(
                "return document.querySelectorAll('#app script, #app [onerror], #app [onload], \
                 #app a[href^=\"javascript:\"]').length;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(scripts, json!(0), "{step}: script in the page's DOM");
        // The text is shown as text.
        let page_text = browser.text("#app", WAIT).await.unwrap();
        assert!(!page_text.is_empty());
        browser.screenshot(step).await.unwrap();
        // Back to this tab, if a link opened another.
        let windows = browser.client().windows().await.unwrap();
        if windows.len() > 1 {
            let here = browser.client().window().await.unwrap();
            for w in windows.into_iter().filter(|w| *w != here) {
                browser.client().switch_to_window(w).await.unwrap();
                assert_eq!(browser.alert_present().await.unwrap(), None);
                browser.client().close_window().await.unwrap();
            }
            browser.client().switch_to_window(here).await.unwrap();
        }
    }
    assert_eq!(tripwire.hits(), Vec::<String>::new());
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// g. No serious or critical accessibility violation on the main pages.

async fn no_serious_accessibility_violation(viewport: Viewport) {
    let llm = ScriptedLlm::start([
        Turn::tool_call("Read", json!({"file_path": "missing.txt"})),
        complete("# Done\n\nA *finished* job."),
    ])
    .await;
    let project = auth_project();
    let root = user_with_token(&project, "root@example.test", true, "read,write,admin").await;
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, Some(&root), "one", "A job to look at").await;
    until(&served, Some(&root), &id, |j| j["status"] == "completed").await;
    let (status, body) = call(
        &served,
        reqwest::Method::POST,
        "/api/v1/schedules",
        Some(&root),
        Some(json!({"piece": "one", "task": "every morning", "spec": "daily 09:00", "tz": "Europe/Paris"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let browser = browser("no_serious_accessibility_violation", viewport).await;

    // Each page, and what shows that it has been built.
    let pages = [
        ("login", "/login".to_string(), "#app form"),
        ("submit", "/".to_string(), "#submit-form"),
        ("jobs", "/jobs".to_string(), "table#jobs tr[data-job-id]"),
        (
            "job",
            format!("/jobs/{id}"),
            "#job-status .badge[data-status=\"completed\"]",
        ),
        (
            "pieces",
            "/pieces".to_string(),
            "table#pieces tr[data-piece]",
        ),
        ("piece", "/pieces/one".to_string(), "#diagram svg g.node"),
        (
            "schedules",
            "/schedules".to_string(),
            "table#schedules tr[data-schedule-id]",
        ),
        ("config", "/config".to_string(), "#config-editor"),
        ("admin", "/admin".to_string(), "#users"),
    ];
    let mut failures = String::new();
    for (name, path, built) in pages {
        if name == "submit" {
            log_in(&browser, &served, &root).await;
        }
        browser.goto(&served.url(&path)).await.unwrap();
        if let Err(e) = browser.wait_for(built, WAIT).await {
            failures.push_str(&format!("{path}: the page was not built ({built}): {e}\n"));
            continue;
        }
        browser.screenshot(name).await.unwrap();
        let serious: Vec<_> = browser
            .axe()
            .await
            .unwrap()
            .into_iter()
            .filter(|v| v.is_serious())
            .collect();
        for violation in serious {
            failures.push_str(&format!("{path}: {violation}"));
        }
    }
    assert!(failures.is_empty(), "accessibility:\n{failures}");
    browser.close().await;
    served.stop().await;
}

// ---------------------------------------------------------------------------------------------
// h. 401 shows the login page; 403 the "Not allowed" page.

async fn unauthorised_and_forbidden_pages(viewport: Viewport) {
    let project = auth_project();
    let reader = user_with_token(&project, "reader@example.test", false, "read").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let browser = browser("unauthorised_and_forbidden_pages", viewport).await;

    // No token: the jobs page sends the browser to log in, and back after.
    browser.goto(&served.url("/jobs")).await.unwrap();
    let url = browser
        .wait_for_url("the login page", |u| u.contains("/login"), WAIT)
        .await
        .unwrap();
    assert!(url.contains("why=401"), "{url}");
    assert!(url.contains("next=%2Fjobs"), "{url}");
    browser
        .wait_for("#app input[type=\"password\"]", WAIT)
        .await
        .unwrap();
    browser.screenshot("1-login").await.unwrap();
    browser
        .type_into("#app input[type=\"password\"]", &reader, WAIT)
        .await
        .unwrap();
    browser
        .click("#app form button[type=\"submit\"]", WAIT)
        .await
        .unwrap();
    browser
        .wait_for_url("back to the jobs", |u| u.ends_with("/jobs"), WAIT)
        .await
        .unwrap();
    browser.wait_for("table#jobs", WAIT).await.unwrap();

    // A read-only token on the admin page: not allowed, said so.
    browser.goto(&served.url("/admin")).await.unwrap();
    browser
        .wait_until(
            "the Not allowed page",
            "document.getElementById('title').textContent === 'Not allowed'",
            WAIT,
        )
        .await
        .unwrap();
    let explained = browser.text("#app", WAIT).await.unwrap();
    assert!(!explained.trim().is_empty());
    browser.screenshot("2-not-allowed").await.unwrap();
    browser.close().await;
    served.stop().await;
}
