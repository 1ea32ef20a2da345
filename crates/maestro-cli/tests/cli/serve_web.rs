//! What `maestro serve` does for the web UI, over real HTTP on 127.0.0.1: the pages and their
//! security headers, the embedded assets, a browser's 404, a job's result and question as
//! sanitised HTML, a share link that answers a browser with the page, and files shown inline
//! under a sandboxing policy. (The pages themselves are driven in Chromium by `web_ui.rs`.)

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support;

use support::jobs::{Project, complete};

#[tokio::test(flavor = "multi_thread")]
async fn pages_and_assets_are_served_with_a_strict_policy() {
    let project = Project::new();
    let served = project.serve_plain(&[]);
    for path in [
        "/",
        "/jobs",
        "/jobs/0190b6e1-0000-7000-8000-000000000000",
        "/pieces",
        "/pieces/one",
        "/schedules",
        "/config",
        "/admin",
        "/login",
    ] {
        let response = served.http.get(served.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let headers = response.headers().clone();
        assert_eq!(
            headers["content-type"], "text/html; charset=utf-8",
            "{path}"
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "no-referrer");
        let html = response.text().await.unwrap();
        assert!(html.contains("<main id=\"main\""), "{path}: {html}");
        assert!(!html.contains("<script>"), "{path}: inline script");
    }

    // The assets are embedded, typed, and revalidated by ETag.
    let response = served
        .http
        .get(served.url("/ui/lib.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("export function follow")
    );
    let again = served
        .http
        .get(served.url("/ui/lib.js"))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 304);
    let css = served
        .http
        .get(served.url("/ui/app.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    let missing = served
        .http
        .get(served.url("/ui/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    // An unknown path: a page for a browser, a problem for a script, and always a problem
    // under /api/.
    let page = served
        .http
        .get(served.url("/nowhere"))
        .header("Accept", "text/html,application/xhtml+xml")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 404);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let (status, problem) = served.get("/nowhere").await;
    assert_eq!(status, 404);
    assert!(
        problem["detail"].as_str().unwrap().contains("no route"),
        "{problem}"
    );
    let api = served
        .http
        .get(served.url("/api/v1/nowhere"))
        .header("Accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 404);
    assert_eq!(api.headers()["content-type"], "application/problem+json");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_and_a_question_come_as_sanitised_html_and_a_share_link_serves_the_page() {
    let llm = ScriptedLlm::start([
        Turn::tool_call(
            "complete",
            json!({"status": "needs_user_input",
                   "result": "Which **format**? Reply with ANSWER: <colour>\n\n<img src=x onerror=alert(1)>"}),
        ),
        complete("**Done** <script>alert(2)</script> [x](javascript:alert(3)) ![i](https://evil.example/i.png)"),
    ])
    .await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let (status, job) = served
        .post("/api/v1/jobs", json!({"piece": "one", "task": "Write it"}))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();

    let waiting = served
        .until(&id, "waiting", |j| j["status"] == "waiting_input")
        .await;
    let question = waiting["question_html"].as_str().unwrap();
    assert!(question.contains("<strong>format</strong>"), "{question}");
    // HTML in the text is shown as text, escaped: never dropped, never an element.
    assert!(question.contains("ANSWER: &lt;colour&gt;"), "{question}");
    assert!(
        question.contains("&lt;img src=x onerror=alert(1)&gt;") && !question.contains("<img"),
        "{question}"
    );
    let (status, _) = served
        .post(
            &format!("/api/v1/jobs/{id}/comments"),
            json!({"body": "Markdown"}),
        )
        .await;
    assert_eq!(status, 201);
    let done = served
        .until(&id, "completed", |j| j["status"] == "completed")
        .await;
    let html = done["result"]["html"].as_str().unwrap();
    assert!(html.contains("<strong>Done</strong>"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
        "{html}"
    );
    for bad in ["<script", "javascript:", "evil.example"] {
        assert!(!html.contains(bad), "{bad} in {html}");
    }
    // Every model call of the job names it and its movement, for a gateway to attribute.
    for request in llm
        .recorded()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
    {
        assert_eq!(request.header("x-maestro-job"), Some(id.as_str()));
        assert_eq!(request.header("x-maestro-movement"), Some("work"));
    }
    assert_eq!(llm.requests().len(), 2);
    // The Markdown as the run gave it is still there for scripts.
    assert!(
        done["result"]["result"]
            .as_str()
            .unwrap()
            .contains("<script>alert(2)</script>")
    );

    let (status, link) = served
        .post(&format!("/api/v1/jobs/{id}/share"), json!({}))
        .await;
    assert_eq!(status, 201, "{link}");
    let token = link["token"].as_str().unwrap();
    // A browser following the link gets the read-only page (no navigation to other pages) …
    let page = served
        .http
        .get(served.url(&format!("/share/{token}")))
        .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/ui/job.js") && !html.contains("/admin"),
        "{html}"
    );
    // … and the page's own request gets the job, with its result as sanitised HTML.
    let (status, shared) = served.get(&format!("/share/{token}")).await;
    assert_eq!(status, 200, "{shared}");
    assert_eq!(shared["result"]["html"].as_str().unwrap(), html_of(&done));
}

fn html_of(job: &serde_json::Value) -> &str {
    job["result"]["html"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn files_download_unless_shown_inline_and_never_run_script() {
    let llm = ScriptedLlm::start([complete("ok")]).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let form = reqwest::multipart::Form::new()
        .text("piece", "one")
        .text("task", "Read them")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"the notes".to_vec()).file_name("notes.txt"),
        )
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"<script>alert(1)</script>".to_vec())
                .file_name("page.html"),
        );
    let response = served
        .http
        .post(served.url("/api/v1/jobs"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let job: serde_json::Value = response.json().await.unwrap();
    let id = job["id"].as_str().unwrap();

    let get = |path: String| {
        let url = served.url(&path);
        let http = served.http.clone();
        async move { http.get(url).send().await.unwrap() }
    };
    let download = get(format!("/api/v1/jobs/{id}/files/notes.txt")).await;
    assert_eq!(download.status().as_u16(), 200);
    assert_eq!(
        download.headers()["content-disposition"],
        "attachment; filename=\"notes.txt\""
    );
    let inline = get(format!("/api/v1/jobs/{id}/files/notes.txt?inline=1")).await;
    assert_eq!(
        inline.headers()["content-disposition"],
        "inline; filename=\"notes.txt\""
    );
    assert_eq!(
        inline.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert!(
        inline.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(inline.text().await.unwrap(), "the notes");
    // HTML is never served as HTML, and is not shown inline.
    let html = get(format!("/api/v1/jobs/{id}/files/page.html?inline=1")).await;
    assert_eq!(html.headers()["content-type"], "application/octet-stream");
    assert_eq!(
        html.headers()["content-disposition"],
        "attachment; filename=\"page.html\""
    );
    let bad = get(format!("/api/v1/jobs/{id}/files/notes.txt?inline=1&x=2")).await;
    assert_eq!(bad.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_piece_is_named_without_the_server_s_paths() {
    let project = Project::new();
    let served = project.serve_plain(&[]);
    let (status, problem) = served
        .post("/api/v1/jobs", json!({"piece": "nosuch", "task": "x"}))
        .await;
    assert_eq!(status, 422, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("`nosuch`") && detail.contains("known pieces: one"),
        "{detail}"
    );
    let root = project.path().to_str().unwrap();
    assert!(!problem.to_string().contains(root), "{problem}");
    assert_eq!(problem["field"], "piece");
    // A schedule of an unknown piece, likewise.
    let (status, problem) = served
        .post(
            "/api/v1/schedules",
            json!({"piece": "nosuch", "task": "x", "spec": "every 30m"}),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    assert!(!problem.to_string().contains(root), "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("known pieces: one"),
        "{problem}"
    );
    assert_eq!(problem["field"], "piece");
}
