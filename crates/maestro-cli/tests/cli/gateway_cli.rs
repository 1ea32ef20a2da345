//! The LLM gateway as the `maestro` binary runs it, over real HTTP on 127.0.0.1: mounted at
//! `/v1` by `maestro serve` when `gateway.enabled` is set (its metrics in the server's), its
//! usage recorded in the store and read back by `maestro gateway usage`, and the upstream's key
//! in neither the log nor the store.

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, stderr};

const UPSTREAM_KEY: &str = "sk-gateway-test-5b1c9e";

#[tokio::test(flavor = "multi_thread")]
async fn serve_mounts_the_gateway_at_v1_and_its_usage_reads_back_without_the_key_anywhere() {
    let llm =
        ScriptedLlm::start([Turn::text("Hello through the gateway.").with_usage(20, 6)]).await;
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!(
            "llm:\n  tool_mode: native\n  models:\n    some-model: {{price: {{input_per_mtok: 0.5, output_per_mtok: 1.5}}}}\n\
             gateway:\n  enabled: true\n  upstreams:\n    primary: {{kind: openai, base_url: \"{}\", api_key_env: GW_TEST_KEY}}\n\
             \x20 models:\n    team-model:\n      - {{upstream: primary, model: some-model}}\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let served = project.serve_with_env(
        &llm.base_url(),
        &["--no-worker"],
        &[("GW_TEST_KEY", UPSTREAM_KEY)],
    );
    let (status, answer) = served
        .post(
            "/v1/chat/completions",
            json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello through the gateway."
    );
    let sent = llm.recorded().pop().unwrap();
    assert_eq!(sent.body["model"], "some-model");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    let (_, metrics) = served.get("/metrics").await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(
        metrics.contains(
            r#"maestro_gateway_requests_total{upstream="primary",model="team-model",key="",status="ok"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let log = served.stop().await;

    let mut usage = project.command(&["gateway", "usage", "--by", "model", "--json"]);
    usage.env("GW_TEST_KEY", UPSTREAM_KEY);
    let out = tokio::task::spawn_blocking(move || usage.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            json!({"key": null, "model": "team-model", "job": null, "requests": 1,
            "prompt_tokens": 20, "completion_tokens": 6, "cost_usd": (20.0 * 0.5 + 6.0 * 1.5) / 1e6})
        ]
    );

    // The key is in neither the log nor any file of the store.
    assert!(!log.contains(UPSTREAM_KEY), "{log}");
    for entry in std::fs::read_dir(project.path().join(".maestro")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes
                    .windows(UPSTREAM_KEY.len())
                    .any(|w| w == UPSTREAM_KEY.as_bytes()),
                "{} holds the upstream key",
                path.display()
            );
        }
    }
}

fn run_maestro(project: &Project, args: &[&str]) -> std::process::Output {
    project.command(args).output().unwrap()
}

/// A project whose configuration routes `team-model` and `other` to an upstream whose key is
/// read from `GW_TEST_KEY`, which the key commands are run without.
fn keys_project() -> Project {
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n\
         gateway:\n  upstreams:\n    primary: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", api_key_env: GW_TEST_KEY}\n\
         \x20 models:\n    team-model:\n      - {upstream: primary, model: some-model}\n\
         \x20   other:\n      - {upstream: primary, model: other-model}\n",
    )
    .unwrap();
    project
}

#[test]
fn gateway_keys_are_printed_once_listed_without_the_key_and_revoked_by_id() {
    let project = keys_project();
    let out = run_maestro(
        &project,
        &[
            "gateway",
            "keys",
            "create",
            "--name",
            "ci",
            "--models",
            "team-model,other",
            "--budget-usd",
            "2.5",
            "--period",
            "day",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = created["key"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    assert!(key.starts_with("mk-") && key.len() == 3 + 43, "{key}");

    let list = |project: &Project| -> Vec<Value> {
        let out = run_maestro(project, &["gateway", "keys", "list", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains(&key), "the list shows the key: {text}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let listed = list(&project);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["name"], "ci");
    assert_eq!(listed[0]["models"], json!(["team-model", "other"]));
    assert_eq!(listed[0]["budget_usd"], 2.5);
    assert_eq!(listed[0]["period"], "day");
    assert!(key.starts_with(listed[0]["prefix"].as_str().unwrap()));
    assert_eq!(listed[0]["revoked_at"], Value::Null);

    let out = run_maestro(&project, &["gateway", "keys", "revoke", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(list(&project)[0]["revoked_at"].is_string());
    let out = run_maestro(&project, &["gateway", "keys", "revoke", "no-such-id"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no gateway key has the id"),
        "{}",
        stderr(&out)
    );

    // The key itself is in no file of the store.
    for entry in std::fs::read_dir(project.path().join(".maestro")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                "{} holds the key",
                path.display()
            );
        }
    }
}

fn with_upstream_key(project: &Project, args: &[&str]) -> std::process::Output {
    project
        .command(args)
        .env("GW_TEST_KEY", UPSTREAM_KEY)
        .output()
        .unwrap()
}

/// A project whose configuration routes `team-model` to `upstream` with the upstream key read
/// from `GW_TEST_KEY`; on PostgreSQL when `db` is given.
fn gateway_project(upstream: &ScriptedLlm, db: Option<String>) -> Project {
    let mut project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!(
            "llm:\n  tool_mode: native\n\
             gateway:\n  upstreams:\n    primary: {{kind: openai, base_url: \"{}\", api_key_env: GW_TEST_KEY}}\n\
             \x20 models:\n    team-model:\n      - {{upstream: primary, model: some-model}}\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    project.db = db;
    project
}

/// 100 concurrent requests, spread over `gateways`, on a key whose token budget fits ten: ten
/// are served, ninety get a 429 that names the budget, the recorded usage stays within it, and
/// neither key is in any log.
async fn a_burst_over_gateway_processes_stays_within_the_keys_budget(
    project: &Project,
    upstream: &ScriptedLlm,
    gateways: usize,
) -> Vec<String> {
    let out = with_upstream_key(
        project,
        &[
            "gateway",
            "keys",
            "create",
            "--name",
            "team",
            "--budget-tokens",
            "740",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = created["key"].as_str().unwrap().to_string();
    let served: Vec<_> = (0..gateways)
        .map(|_| project.gateway(&[("GW_TEST_KEY", UPSTREAM_KEY)]))
        .collect();
    let http = reqwest::Client::new();
    // The prompt's estimate (8 tokens, plus the chat template's allowance of 48 a request and 8
    // a message) and max_tokens (10) are what each answer spends: 74 tokens.
    let body = json!({"model": "team-model", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let calls = (0..100).map(|i| {
        let request = http
            .post(served[i % gateways].url("/v1/chat/completions"))
            .bearer_auth(&key)
            .json(&body);
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        }
    });
    let answers = futures::future::join_all(calls).await;
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(ok, 10, "{answers:?}");
    for (status, body) in &answers {
        if *status != 200 {
            assert_eq!(*status, 429, "{body}");
            assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
            assert_eq!(body["error"]["budget"]["key"], "team", "{body}");
        }
    }
    assert_eq!(upstream.requests().len(), 10);
    let mut logs = Vec::new();
    for gateway in served {
        logs.push(gateway.stop().await);
    }
    let out = with_upstream_key(project, &["gateway", "usage", "--by", "key", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let team = rows.iter().find(|r| r["key"] == "team").unwrap();
    assert_eq!(team["requests"], 10);
    let spent =
        team["prompt_tokens"].as_u64().unwrap() + team["completion_tokens"].as_u64().unwrap();
    assert!(spent <= 740, "{team}");
    for log in &logs {
        assert!(!log.contains(&key) && !log.contains(UPSTREAM_KEY), "{log}");
    }
    vec![key]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_budget_holds_under_a_burst_through_the_gateway_process_on_sqlite() {
    let upstream =
        ScriptedLlm::start((0..100).map(|_| Turn::text("hello").with_usage(64, 10))).await;
    let project = gateway_project(&upstream, None);
    let keys =
        a_burst_over_gateway_processes_stays_within_the_keys_budget(&project, &upstream, 1).await;
    // Neither the virtual key nor the upstream's is in any file of the store.
    for entry in std::fs::read_dir(project.path().join(".maestro")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            for secret in keys.iter().map(String::as_str).chain([UPSTREAM_KEY]) {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{} holds a key",
                    path.display()
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_key_budget_holds_under_a_burst_through_two_gateway_processes_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let upstream =
        ScriptedLlm::start((0..100).map(|_| Turn::text("hello").with_usage(64, 10))).await;
    let project = gateway_project(&upstream, Some(cluster.url()));
    a_burst_over_gateway_processes_stays_within_the_keys_budget(&project, &upstream, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_are_made_listed_and_revoked_over_the_api_and_usage_reads_back() {
    let upstream = ScriptedLlm::start((0..40).map(|_| Turn::text("hello").with_usage(8, 2))).await;
    let project = gateway_project(&upstream, None);
    let config = project.path().join(".maestro/config.yaml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("gateway:\n", "gateway:\n  enabled: true\n");
    std::fs::write(&config, text).unwrap();
    let served = project.serve_with_env(
        &upstream.base_url(),
        &["--no-worker"],
        &[("GW_TEST_KEY", UPSTREAM_KEY)],
    );
    let (status, made) = served
        .post(
            "/api/v1/gateway/keys",
            json!({"name": "api-key", "models": ["team-model"], "rpm": 60, "budget_tokens": 100000}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let key = made["key"].as_str().unwrap().to_string();
    let id = made["id"].as_str().unwrap().to_string();
    assert!(key.starts_with("mk-"));
    assert_eq!(made["state"], "active");
    assert_eq!(made["budget_tokens"], 100000);

    let (status, problem) = served
        .post(
            "/api/v1/gateway/keys",
            json!({"name": "bad", "period": "year"}),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "period", "{problem}");

    let (status, listed) = served.get("/api/v1/gateway/keys").await;
    assert_eq!(status, 200);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert!(!listed.to_string().contains(&key), "{listed}");

    let chat = |bearer: String| {
        let request = served
            .http
            .post(served.url("/v1/chat/completions"))
            .bearer_auth(bearer)
            .json(&json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]}));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(chat(key.clone()).await, 200);

    let response = served
        .http
        .delete(served.url(&format!("/api/v1/gateway/keys/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let response = served
        .http
        .delete(served.url("/api/v1/gateway/keys/no-such-id"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    // A gateway takes a key it looked up from memory for a second: the revocation holds after.
    let revoked_at = std::time::Instant::now();
    let mut served_ok: u64 = 1;
    loop {
        let status = chat(key.clone()).await;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        served_ok += 1;
        assert!(
            revoked_at.elapsed() < std::time::Duration::from_secs(3),
            "the revoked key still works"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, listed) = served.get("/api/v1/gateway/keys").await;
    assert_eq!(listed[0]["state"], "revoked");

    // The usage writer batches; wait for the served request's record.
    let mut usage = Value::Null;
    for _ in 0..100 {
        let (status, body) = served.get("/api/v1/usage?by=key").await;
        assert_eq!(status, 200, "{body}");
        if body["groups"][0]["requests"] == served_ok {
            usage = body;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(usage["by"], "key");
    assert_eq!(
        usage["groups"][0],
        json!({"key": "api-key", "model": null, "job": null, "requests": served_ok,
            "prompt_tokens": 8 * served_ok, "completion_tokens": 2 * served_ok, "cost_usd": 0.0})
    );
    let (status, problem) = served.get("/api/v1/usage?by=colour").await;
    assert_eq!(status, 400, "{problem}");
    let (status, problem) = served.get("/api/v1/usage?from=yesterday").await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "from");

    let (_, audit) = served.get("/api/v1/admin/audit?order=newest").await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"gateway_key_created") && actions.contains(&"gateway_key_revoked"),
        "{audit}"
    );
    assert!(!audit.to_string().contains(&key), "{audit}");
    let log = served.stop().await;
    assert!(!log.contains(&key) && !log.contains(UPSTREAM_KEY), "{log}");
}

#[test]
fn keys_and_usage_are_managed_without_the_upstreams_keys_set() {
    let project = keys_project();
    let run = |args: &[&str]| {
        let out = project
            .command(args)
            .env_remove("GW_TEST_KEY")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let created: Value = serde_json::from_str(&run(&[
        "gateway",
        "keys",
        "create",
        "--name",
        "ci",
        "--models",
        "team-model",
        "--json",
    ]))
    .unwrap();
    let id = created["id"].as_str().unwrap();
    assert!(run(&["gateway", "keys", "list", "--json"]).contains(id));
    run(&["gateway", "keys", "revoke", id]);
    run(&["gateway", "usage", "--by", "key", "--json"]);
}

#[test]
fn a_key_with_a_field_that_cannot_be_used_is_refused_naming_the_field() {
    let project = keys_project();
    let create = |extra: &[&str]| {
        let mut args = vec!["gateway", "keys", "create", "--json"];
        args.extend(extra);
        with_upstream_key(&project, &args)
    };
    let refused = |extra: &[&str], says: &[&str]| {
        let out = create(extra);
        assert!(!out.status.success(), "{extra:?} was accepted");
        let text = stderr(&out);
        for word in says {
            assert!(text.contains(word), "{extra:?}: {text}");
        }
    };
    refused(
        &["--name", "a", "--period", "day"],
        &["--period", "no budget", "leave the period out"],
    );
    refused(
        &["--name", "b", "--models", "team-model,made-up"],
        &[
            "--models",
            "\"made-up\" is not served",
            "team-model",
            "other",
        ],
    );
    refused(
        &["--name", "c", "--expires", "2020-01-01T00:00:00Z"],
        &["--expires", "has passed", "in the future"],
    );
    let out = create(&["--name", "ci"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first_id = first["id"].as_str().unwrap();
    refused(
        &["--name", "ci", "--budget-tokens", "100"],
        &[
            "--name",
            "a key named \"ci\" exists already",
            first_id,
            "another name",
        ],
    );
    // A revoked key keeps its name: its usage stays its own.
    let out = with_upstream_key(&project, &["gateway", "keys", "revoke", first_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    refused(&["--name", "ci"], &["exists already", "revoked"]);
    // None of the refused ones was made.
    let out = with_upstream_key(&project, &["gateway", "keys", "list", "--json"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_with_a_field_that_cannot_be_used_is_refused_over_the_api() {
    let upstream = ScriptedLlm::start([]).await;
    let project = gateway_project(&upstream, None);
    let served = project.serve_with_env(
        &upstream.base_url(),
        &["--no-worker"],
        &[("GW_TEST_KEY", UPSTREAM_KEY)],
    );
    for (body, field, says) in [
        (
            json!({"name": "a", "period": "week"}),
            "period",
            "no budget",
        ),
        (
            json!({"name": "b", "models": ["made-up"]}),
            "models",
            "team-model",
        ),
        (
            json!({"name": "c", "expires": "2020-01-01T00:00:00Z"}),
            "expires",
            "has passed",
        ),
    ] {
        let (status, problem) = served.post("/api/v1/gateway/keys", body.clone()).await;
        assert_eq!(status, 400, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(field) && detail.contains(says), "{detail}");
    }
    let (status, made) = served
        .post(
            "/api/v1/gateway/keys",
            json!({"name": "team", "budget_tokens": 1000, "period": "day"}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let (status, problem) = served
        .post("/api/v1/gateway/keys", json!({"name": "team"}))
        .await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["field"], "name", "{problem}");
    assert_eq!(problem["existing_id"], made["id"], "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("exists already") && detail.contains(made["id"].as_str().unwrap()),
        "{detail}"
    );
    let (_, listed) = served.get("/api/v1/gateway/keys").await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    served.stop().await;
}
