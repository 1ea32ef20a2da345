//! `maestro serve` with auth: API tokens and their scopes, other users' jobs, a login through a
//! real OpenID provider (PKCE) with its session and CSRF cookies, share links, and a matrix over
//! every route of the OpenAPI document, so that a new route is covered as soon as it exists.

use maestro_testkit::{OidcClient, OidcProvider};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, stderr};
use support::serve::Served;

/// The paths anyone may reach: health, metrics, the API's description, the login itself, and
/// share links (which carry their own secret).
const PUBLIC: [&str; 7] = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/v1/openapi.json",
    "/auth/login",
    "/auth/callback",
    "/share/",
];

fn auth_project(extra: &str) -> Project {
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!("llm:\n  tool_mode: native\nauth:\n  enabled: true\n  admins: [root@example.test]\n{extra}"),
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

async fn call(
    served: &Served,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let url = served.url(path);
    let mut request = match method {
        "get" => served.http.get(url),
        "post" => served.http.post(url).json(&body),
        "put" => served.http.put(url).json(&body),
        "patch" => served.http.patch(url).json(&body),
        "delete" => served.http.delete(url),
        other => panic!("method {other}"),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_scopes_and_owners_decide_what_a_request_may_do() {
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read,write").await;
    let reader = user_with_token(&project, "reader@example.test", false, "read").await;
    let bob = user_with_token(&project, "bob@example.test", false, "read,write").await;
    let root = user_with_token(&project, "root@example.test", true, "read,write,admin").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);

    let job = submit_as(&served, &alice).await;
    assert_eq!(job["owner"], "alice@example.test");
    let id = job["id"].as_str().unwrap().to_string();

    // No credentials, bad credentials.
    let (status, problem) = call(&served, "get", "/api/v1/jobs", None, Value::Null).await;
    assert_eq!(status, 401, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("maestro tokens create"),
        "{problem}"
    );
    let (status, _) = call(
        &served,
        "get",
        "/api/v1/jobs",
        Some("mst_not-a-token"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 401);
    // A read token reads, and may not write.
    let (status, _) = call(&served, "get", "/api/v1/jobs", Some(&reader), Value::Null).await;
    assert_eq!(status, 200);
    let (status, problem) = call(
        &served,
        "post",
        "/api/v1/jobs",
        Some(&reader),
        json!({"piece": "one", "task": "x"}),
    )
    .await;
    assert_eq!(status, 403, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("`write` scope"),
        "{problem}"
    );
    // Another user's job is not found, and is not in their list.
    let (status, _) = call(
        &served,
        "get",
        &format!("/api/v1/jobs/{id}"),
        Some(&bob),
        Value::Null,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &served,
        "post",
        &format!("/api/v1/jobs/{id}/cancel"),
        Some(&bob),
        json!({}),
    )
    .await;
    assert_eq!(status, 404);
    let (_, page) = call(&served, "get", "/api/v1/jobs", Some(&bob), Value::Null).await;
    assert_eq!(page["jobs"], json!([]));
    // Its owner and an admin see it.
    let (_, page) = call(&served, "get", "/api/v1/jobs", Some(&alice), Value::Null).await;
    assert_eq!(page["jobs"][0]["id"], json!(id));
    let (status, _) = call(
        &served,
        "get",
        &format!("/api/v1/jobs/{id}"),
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    // The admin routes want the admin scope and role.
    let (status, _) = call(
        &served,
        "get",
        "/api/v1/admin/users",
        Some(&alice),
        Value::Null,
    )
    .await;
    assert_eq!(status, 403);
    let (status, users) = call(
        &served,
        "get",
        "/api/v1/admin/users",
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!((status, users.as_array().unwrap().len()), (200, 4));

    // A token revoked through the API stops working at once.
    let (status, created) = call(
        &served,
        "post",
        "/api/v1/admin/tokens",
        Some(&root),
        json!({"user": "bob@example.test", "scopes": ["read"]}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let fresh = created["token"].as_str().unwrap().to_string();
    let (status, _) = call(&served, "get", "/api/v1/me", Some(&fresh), Value::Null).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &served,
        "delete",
        &format!("/api/v1/admin/tokens/{}", created["id"].as_str().unwrap()),
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = call(&served, "get", "/api/v1/me", Some(&fresh), Value::Null).await;
    assert_eq!(status, 401);

    // Share links: read-only, that job only, until revoked.
    let (status, share) = call(
        &served,
        "post",
        &format!("/api/v1/jobs/{id}/share"),
        Some(&alice),
        json!({}),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    let link = share["url"].as_str().unwrap().to_string();
    assert!(
        link.ends_with(&format!("/share/{}", share["token"].as_str().unwrap())),
        "{link}"
    );
    let shared_path = format!("/share/{}", share["token"].as_str().unwrap());
    let (status, shared) = call(&served, "get", &shared_path, None, Value::Null).await;
    assert_eq!(
        (status, shared["id"].clone(), shared["task"].clone()),
        (200, json!(id), json!("x"))
    );
    assert!(
        shared.get("owner").is_none() && shared.get("parent_id").is_none(),
        "{shared}"
    );
    let (status, _) = call(
        &served,
        "get",
        &format!("{shared_path}/events?format=jsonl"),
        None,
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    // The token of a share link is no API credential.
    let (status, _) = call(
        &served,
        "get",
        "/api/v1/jobs",
        Some(share["token"].as_str().unwrap()),
        Value::Null,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = call(
        &served,
        "delete",
        &format!("/api/v1/jobs/{id}/shares/{}", share["id"].as_str().unwrap()),
        Some(&alice),
        Value::Null,
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = call(&served, "get", &shared_path, None, Value::Null).await;
    assert_eq!(status, 404);
    // A link expired as made is refused (the app's tests move a clock past an expiry).
    let (status, problem) = call(
        &served,
        "post",
        &format!("/api/v1/jobs/{id}/share"),
        Some(&alice),
        json!({"expires_in_hours": 0}),
    )
    .await;
    assert_eq!(status, 422, "{problem}");

    // Schedules belong to their owner too.
    let (status, schedule) = call(
        &served,
        "post",
        "/api/v1/schedules",
        Some(&alice),
        json!({"piece": "one", "task": "daily report", "spec": "daily 09:00"}),
    )
    .await;
    assert_eq!(status, 201, "{schedule}");
    assert_eq!(schedule["owner"], "alice@example.test");
    let sid = schedule["id"].as_str().unwrap();
    let (_, bobs) = call(&served, "get", "/api/v1/schedules", Some(&bob), Value::Null).await;
    assert_eq!(bobs, json!([]));
    let (status, _) = call(
        &served,
        "get",
        &format!("/api/v1/schedules/{sid}"),
        Some(&bob),
        Value::Null,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &served,
        "delete",
        &format!("/api/v1/schedules/{sid}"),
        Some(&bob),
        Value::Null,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &served,
        "get",
        &format!("/api/v1/schedules/{sid}"),
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);

    // Every write was audited, and no token is in the log.
    let (status, audit) = call(
        &served,
        "get",
        "/api/v1/admin/audit?limit=1000",
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in [
        "user_added",
        "token_created",
        "token_revoked",
        "submit",
        "share_created",
        "share_revoked",
    ] {
        assert!(actions.contains(&action), "{action} missing: {actions:?}");
    }
    // Newest first, a page back in time at a time: the same entries, in the other order.
    let mut newest = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = call(
            &served,
            "get",
            &format!("/api/v1/admin/audit?order=newest&limit=3{cursor}"),
            Some(&root),
            Value::Null,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        newest.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_i64() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    let mut oldest = audit["entries"].as_array().unwrap().clone();
    oldest.reverse();
    assert_eq!(newest, oldest);
    let (status, problem) = call(
        &served,
        "get",
        "/api/v1/admin/audit?order=sideways",
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(problem["field"], "order", "{problem}");
    let log = served.stop().await;
    for secret in [&alice, &reader, &bob, &root, &fresh] {
        assert!(!audit.to_string().contains(secret.as_str()));
        assert!(
            !log.contains(secret.as_str()),
            "a token in the server's log"
        );
    }
}

/// Fills a path template with `id` for `{id}` and a placeholder for the rest.
/// Submits the job `one` / `x` as the holder of `token`; the job as the API answers it.
async fn submit_as(served: &Served, token: &str) -> Value {
    let (status, job) = call(
        served,
        "post",
        "/api/v1/jobs",
        Some(token),
        json!({"piece": "one", "task": "x"}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    job
}

fn fill(path: &str, id: &str) -> String {
    let mut out = String::new();
    for part in path.split('/') {
        if !out.is_empty() || path.starts_with('/') {
            out.push('/');
        }
        if part == "{id}" {
            out.push_str(id);
        } else if part.starts_with('{') {
            out.push_str("placeholder");
        } else {
            out.push_str(part);
        }
    }
    out.replacen("//", "/", 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_refuses_no_credentials_a_small_scope_and_another_users_job() {
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read,write").await;
    let reader = user_with_token(&project, "reader@example.test", false, "read").await;
    let bob = user_with_token(&project, "bob@example.test", false, "read,write,admin").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let (_, job) = call(
        &served,
        "post",
        "/api/v1/jobs",
        Some(&alice),
        json!({"piece": "one", "task": "x"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let (_, doc) = call(&served, "get", "/api/v1/openapi.json", None, Value::Null).await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let public = PUBLIC
            .iter()
            .any(|p| path == p || (p.ends_with('/') && path.starts_with(p)));
        for method in item.as_object().unwrap().keys() {
            let url = fill(path, &id);
            let (status, body) = call(&served, method, &url, None, json!({})).await;
            if public {
                assert_ne!(status, 401, "{method} {path} is public: {body}");
                continue;
            }
            checked += 1;
            assert_eq!(status, 401, "{method} {path} without credentials: {body}");
            let write = method != "get";
            let admin = path.starts_with("/api/v1/admin")
                || path.starts_with("/api/v1/gateway/")
                || path == "/api/v1/usage";
            if write || admin {
                let (status, body) = call(&served, method, &url, Some(&reader), json!({})).await;
                assert_eq!(status, 403, "{method} {path} with a read token: {body}");
            }
            if admin {
                // bob's token has the admin scope, but bob is not an admin.
                let (status, body) = call(&served, method, &url, Some(&bob), json!({})).await;
                assert_eq!(
                    status, 403,
                    "{method} {path} by a user who is not an admin: {body}"
                );
            }
            if path.starts_with("/api/v1/jobs/{id}") {
                let (status, body) = call(&served, method, &url, Some(&bob), json!({})).await;
                assert_eq!(status, 404, "{method} {path} on alice's job by bob: {body}");
                assert!(!body.to_string().contains("\"task\""), "{body}");
            }
        }
    }
    assert!(checked >= 25, "only {checked} operations were checked");
    // Nothing bob or the reader tried changed alice's job.
    let (_, job) = call(
        &served,
        "get",
        &format!("/api/v1/jobs/{id}"),
        Some(&alice),
        Value::Null,
    )
    .await;
    assert_eq!(job["status"], "queued");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_oidc_provider,
    ignore = "needs node 20.12+ and oidc-provider: bash scripts/prerequisites.sh"
)]
async fn a_login_through_the_openid_provider_gives_a_session_whose_writes_need_the_csrf_token() {
    // The server's port is chosen first: the provider must know the redirect URI.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let redirect = format!("http://127.0.0.1:{port}/auth/callback");
    let provider = OidcProvider::start(OidcClient {
        id: "maestro".into(),
        secret: "provider-secret-1234".into(),
        redirect_uri: redirect.clone(),
    })
    .unwrap();
    let project = auth_project(&format!(
        "  oidc:\n    issuer: {}\n    client_id: maestro\n    client_secret_env: MAESTRO_TEST_OIDC_SECRET\n    redirect_url: {redirect}\n",
        provider.issuer()
    ));
    let served = project.serve_with_env(
        "http://127.0.0.1:9",
        &["--no-worker", "--bind", &format!("127.0.0.1:{port}")],
        &[("MAESTRO_TEST_OIDC_SECRET", "provider-secret-1234")],
    );
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let start = browser
        .get(served.url("/auth/login?redirect_to=/jobs/mine"))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status().as_u16(), 303, "{:?}", start.headers());
    let authorize = start.headers()["location"].to_str().unwrap().to_string();
    assert!(authorize.starts_with(provider.issuer()), "{authorize}");
    assert!(
        authorize.contains("code_challenge_method=S256"),
        "{authorize}"
    );
    let back = provider
        .login(&authorize, "carol@example.test")
        .await
        .unwrap();
    assert!(back.starts_with(&redirect), "{back}");
    let done = browser.get(&back).send().await.unwrap();
    assert_eq!(done.status().as_u16(), 303);
    assert_eq!(done.headers()["location"], "/jobs/mine");
    let cookies: Vec<String> = done
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let session = cookies
        .iter()
        .find(|c| c.starts_with("maestro_session="))
        .unwrap();
    assert!(
        session.contains("HttpOnly")
            && session.contains("Secure")
            && session.contains("SameSite=Lax"),
        "{session}"
    );
    let value = |c: &str| {
        c.split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_string()
    };
    let session_id = value(session);
    let csrf = value(
        cookies
            .iter()
            .find(|c| c.starts_with("maestro_csrf="))
            .unwrap(),
    );
    let jar = format!("maestro_session={session_id}; maestro_csrf={csrf}");

    let me: Value = browser
        .get(served.url("/api/v1/me"))
        .header("cookie", &jar)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (me["email"].clone(), me["auth"].clone(), me["role"].clone()),
        (json!("carol@example.test"), json!("session"), json!("user"))
    );
    // The same code cannot log in twice.
    let again = browser.get(&back).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 400);
    // A write with the cookie alone is refused; with the CSRF token it is done.
    let submit = json!({"piece": "one", "task": "from the browser"});
    let refused = browser
        .post(served.url("/api/v1/jobs"))
        .header("cookie", &jar)
        .json(&submit)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("X-CSRF-Token"),
        "{problem}"
    );
    let wrong = browser
        .post(served.url("/api/v1/jobs"))
        .header("cookie", &jar)
        .header("x-csrf-token", "guess")
        .json(&submit)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 403);
    let made = browser
        .post(served.url("/api/v1/jobs"))
        .header("cookie", &jar)
        .header("x-csrf-token", &csrf)
        .json(&submit)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status().as_u16(), 201);
    let job: Value = made.json().await.unwrap();
    assert_eq!(job["owner"], "carol@example.test");
    // Logging out ends the session.
    let out = browser
        .post(served.url("/auth/logout"))
        .header("cookie", &jar)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status().as_u16(), 204);
    let after = browser
        .get(served.url("/api/v1/me"))
        .header("cookie", &jar)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status().as_u16(), 401);
    let log = served.stop().await;
    for secret in [session_id.as_str(), csrf.as_str(), "provider-secret-1234"] {
        assert!(!log.contains(secret), "a secret in the server's log");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expiry_of_zero_or_too_far_is_refused_naming_the_field() {
    let project = auth_project("");
    let root = user_with_token(&project, "root@example.test", true, "read,write,admin").await;
    let out = project
        .maestro(&[
            "tokens",
            "create",
            "--user",
            "root@example.test",
            "--scopes",
            "read",
            "--expires-days",
            "4294967295",
        ])
        .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("an expiry must be at least 1 (day or hour) and at most 100 years"),
        "{}",
        stderr(&out)
    );
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let job = submit_as(&served, &root).await;
    let share = format!("/api/v1/jobs/{}/share", job["id"].as_str().unwrap());
    for hours in [0_u64, 99_999_999_999] {
        let (status, problem) = call(
            &served,
            "post",
            &share,
            Some(&root),
            json!({"expires_in_hours": hours}),
        )
        .await;
        assert_eq!(
            (status, &problem["field"]),
            (422, &json!("expires_in_hours")),
            "{problem}"
        );
        // Each bound is named as the one crossed.
        let detail = problem["detail"].as_str().unwrap();
        if hours == 0 {
            assert!(
                detail.contains("must be at least 1") && !detail.contains("smaller"),
                "{problem}"
            );
        } else {
            assert!(
                detail.contains("at most 876000 hours (100 years)"),
                "{problem}"
            );
        }
    }
    for days in [0_u64, 4_294_967_295] {
        let (status, problem) = call(
            &served,
            "post",
            "/api/v1/admin/tokens",
            Some(&root),
            json!({"user": "root@example.test", "scopes": ["read"], "expires_days": days}),
        )
        .await;
        assert_eq!(
            (status, &problem["field"]),
            (422, &json!("expires_days")),
            "{problem}"
        );
        let detail = problem["detail"].as_str().unwrap();
        if days == 0 {
            assert!(
                detail.contains("must be at least 1") && !detail.contains("smaller"),
                "{problem}"
            );
        } else {
            assert!(
                detail.contains("at most 36500 days (100 years)"),
                "{problem}"
            );
        }
    }
    let (status, created) = call(
        &served,
        "post",
        &share,
        Some(&root),
        json!({"expires_in_hours": 24}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_asks_for_a_bearer_token_and_names_the_login_only_with_a_provider() {
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let ask = |authorization: Option<String>| {
        let mut request = served.http.get(served.url("/api/v1/jobs"));
        if let Some(value) = authorization {
            request = request.header("Authorization", value);
        }
        request.send()
    };
    // (Authorization, the challenge)
    let cases = [
        (None, r#"Bearer realm="maestro""#),
        (Some(format!("Basic {alice}")), r#"Bearer realm="maestro""#),
        (
            Some("Bearer mst_not-a-token".to_string()),
            r#"Bearer realm="maestro", error="invalid_token""#,
        ),
    ];
    for (authorization, challenge) in cases {
        let response = ask(authorization.clone()).await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{authorization:?}");
        assert_eq!(
            response.headers()["www-authenticate"],
            challenge,
            "{authorization:?}"
        );
        let problem: Value = response.json().await.unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("maestro tokens create") && !detail.contains("/auth/login"),
            "no OpenID provider is configured, yet: {problem}"
        );
    }
    let (status, _) = call(&served, "get", "/auth/login", None, Value::Null).await;
    assert_eq!(status, 404);
    served.stop().await;

    // With a provider, the login is named (the provider is asked nothing until a login).
    let project = auth_project(
        "  public_url: http://127.0.0.1:9\n  oidc:\n    issuer: http://127.0.0.1:9/\n    \
         client_id: maestro\n    client_secret_env: MAESTRO_TEST_OIDC_SECRET\n",
    );
    let served = project.serve_with_env(
        "http://127.0.0.1:9",
        &["--no-worker"],
        &[("MAESTRO_TEST_OIDC_SECRET", "provider-secret-1234")],
    );
    let response = served
        .http
        .get(served.url("/api/v1/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"Bearer realm="maestro""#
    );
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("/auth/login"),
        "{problem}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_read_in_any_case() {
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response = served
            .http
            .get(served.url("/api/v1/jobs"))
            .header("Authorization", format!("{scheme} {alice}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{scheme}");
    }
    let response = served
        .http
        .get(served.url("/api/v1/jobs"))
        .header("Authorization", format!("Basic {alice}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_list_shows_a_user_only_their_own_running_jobs() {
    let llm = maestro_testkit::ScriptedLlm::start([maestro_testkit::Turn::stall(
        std::time::Duration::from_secs(60),
    )])
    .await;
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read,write").await;
    let bob = user_with_token(&project, "bob@example.test", false, "read,write").await;
    let root = user_with_token(&project, "root@example.test", true, "read,write,admin").await;
    let served = project.serve(&llm.base_url(), &[]);
    let job = submit_as(&served, &alice).await;
    let id = job["id"].clone();
    let running = |workers: &Value| -> Vec<Value> {
        workers
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["running"].as_array().unwrap().clone())
            .collect()
    };
    let started = std::time::Instant::now();
    loop {
        let (status, workers) =
            call(&served, "get", "/api/v1/workers", Some(&root), Value::Null).await;
        assert_eq!(status, 200, "{workers}");
        if running(&workers) == std::slice::from_ref(&id) {
            break;
        }
        assert!(started.elapsed().as_secs() < 30, "never running: {workers}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, workers) = call(&served, "get", "/api/v1/workers", Some(&alice), Value::Null).await;
    assert_eq!(running(&workers), std::slice::from_ref(&id), "{workers}");
    let (_, workers) = call(&served, "get", "/api/v1/workers", Some(&bob), Value::Null).await;
    assert!(!workers.as_array().unwrap().is_empty(), "{workers}");
    assert_eq!(running(&workers), Vec::<Value>::new(), "{workers}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stored_pieces_are_changed_by_admins_and_checked_by_anyone() {
    const PIECE: &str = "name: shared\ndescription: every user's jobs run it\nmax_movements: 3\n\
                         initial_movement: work\nmovements:\n  - name: work\n    edit: false\n    \
                         persona: You work.\n    instruction: \"{task}\"\n    allowed_tools: [Read]\n    \
                         rules: []\n";
    let project = auth_project("");
    let alice = user_with_token(&project, "alice@example.test", false, "read,write").await;
    let root = user_with_token(&project, "root@example.test", true, "read,write").await;
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let send = |method: reqwest::Method, path: &str, token: &str| {
        served
            .http
            .request(method, served.url(path))
            .bearer_auth(token)
            .header("content-type", "application/yaml")
            .body(PIECE)
            .send()
    };
    use reqwest::Method;
    // A user who is not an admin may neither write nor delete a stored piece.
    let response = send(Method::PUT, "/api/v1/pieces/shared", &alice)
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("admins only"),
        "{problem}"
    );
    // An admin may.
    let response = send(Method::PUT, "/api/v1/pieces/shared", &root)
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = send(Method::DELETE, "/api/v1/pieces/shared", &alice)
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    // Reading, validating and previewing the prompts stay anyone's.
    for (method, path) in [
        (Method::GET, "/api/v1/pieces/shared"),
        (Method::POST, "/api/v1/pieces/validate"),
        (Method::GET, "/api/v1/pieces/shared/prompt?movement=work"),
        (Method::POST, "/api/v1/pieces/shared/prompt?movement=work"),
    ] {
        let response = send(method.clone(), path, &alice).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{method} {path}");
    }
    let response = send(Method::DELETE, "/api/v1/pieces/shared", &root)
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
}
