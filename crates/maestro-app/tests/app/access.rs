//! Users, tokens, sessions, logins, share links, owners and the audit log through the app's
//! functions, on a real SQLite file with a clock the tests move.

use std::sync::Arc;
use std::time::Duration;

use maestro_app::{
    AccessError, AuditAction, AuthVia, GRACE, Misfire, Role, ScheduleRequest, Scope, Spec,
    Submission, TOKEN_PREFIX, add_schedule, add_user, audit_log, authenticate_token, begin_login,
    create_session, create_share, create_token, end_session, find_user, list_jobs_of, list_shares,
    list_tokens, list_users, login_user, record_audit, resolve_share, revoke_share, revoke_token,
    session_principal, set_role, show_job, submit, take_login, tick,
};
use maestro_config::Config;
use maestro_store::{
    Classes, JobQueue as _, ManualClock, NewChild, Spawned, Store, StoreUrl, secret_hash,
};
use pretty_assertions::assert_eq;
use sqlx::Connection;

const PIECE: &str = "\
name: one
description: one movement that completes
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: \"{task}\"
    allowed_tools: [Read]
    rules: []
";

const T0: time::OffsetDateTime = time::macros::datetime!(2026-01-01 00:00:00 UTC);
const HOUR: Duration = Duration::from_secs(3600);

struct Project {
    dir: tempfile::TempDir,
    store: Store,
    clock: Arc<ManualClock>,
}

impl Project {
    async fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("one.yaml"), PIECE).unwrap();
        let url: StoreUrl = format!("sqlite://{}", dir.path().join("m.db").display())
            .parse()
            .unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let store = Store::open(&url)
            .await
            .unwrap()
            .with_clock(clock.clone() as Arc<dyn maestro_store::Clock>);
        Project { dir, store, clock }
    }

    fn piece(&self) -> String {
        self.dir.path().join("one.yaml").display().to_string()
    }

    fn raw_url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("m.db").display())
    }

    async fn token(&self, email: &str, scopes: &[Scope]) -> String {
        let (_, token) = create_token(&self.store, email, scopes, None, None)
            .await
            .unwrap();
        token.expose().to_string()
    }

    async fn principal(&self, token: &str) -> Option<maestro_app::Principal> {
        authenticate_token(&self.store, token).await.unwrap()
    }
}

#[tokio::test]
async fn a_read_token_cannot_write_and_admin_scope_needs_the_admin_role() {
    let p = Project::new().await;
    add_user(&p.store, "Reader@Example.com", false)
        .await
        .unwrap();
    add_user(&p.store, "root@example.com", true).await.unwrap();

    let read = p.token("reader@example.com", &[Scope::Read]).await;
    let who = p.principal(&read).await.unwrap();
    assert_eq!(who.email, "reader@example.com");
    assert!(matches!(who.via, AuthVia::Token { .. }));
    assert!(who.can(Scope::Read));
    assert!(!who.can(Scope::Write));
    assert!(!who.can(Scope::Admin));

    let write = p.token("reader@example.com", &[Scope::Write]).await;
    let who = p.principal(&write).await.unwrap();
    assert!(who.can(Scope::Read) && who.can(Scope::Write) && !who.can(Scope::Admin));

    // An admin-scoped token of a user who is not an admin does not get admin...
    let wannabe = p.token("reader@example.com", &[Scope::Admin]).await;
    let who = p.principal(&wannabe).await.unwrap();
    assert!(who.can(Scope::Write));
    assert!(!who.can(Scope::Admin));
    // ...an admin's does, and an admin's read token still only reads.
    let root_admin = p.token("root@example.com", &[Scope::Admin]).await;
    assert!(p.principal(&root_admin).await.unwrap().can(Scope::Admin));
    let root_read = p.token("root@example.com", &[Scope::Read]).await;
    let who = p.principal(&root_read).await.unwrap();
    assert!(who.can(Scope::Read) && !who.can(Scope::Write) && !who.can(Scope::Admin));
    // An admin demoted to user loses admin at once.
    set_role(&p.store, "root@example.com", Role::User)
        .await
        .unwrap();
    assert!(!p.principal(&root_admin).await.unwrap().can(Scope::Admin));

    // Sessions grant what the role allows.
    let reader = find_user(&p.store, "reader@example.com")
        .await
        .unwrap()
        .unwrap();
    let session = create_session(&p.store, &reader.id, HOUR).await.unwrap();
    let (who, _) = session_principal(&p.store, session.id.expose())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who.via, AuthVia::Session);
    assert!(who.can(Scope::Write) && !who.can(Scope::Admin));
    set_role(&p.store, "reader@example.com", Role::Admin)
        .await
        .unwrap();
    let (who, _) = session_principal(&p.store, session.id.expose())
        .await
        .unwrap()
        .unwrap();
    assert!(who.can(Scope::Admin));
}

#[tokio::test]
async fn tokens_are_mst_secrets_shown_once_and_stored_as_hashes() {
    let p = Project::new().await;
    add_user(&p.store, "ana@example.com", false).await.unwrap();
    let (info, token) = create_token(
        &p.store,
        "ana@example.com",
        &[Scope::Write, Scope::Read, Scope::Read],
        Some("ci".into()),
        None,
    )
    .await
    .unwrap();
    let token = token.expose().to_string();
    assert!(token.starts_with(TOKEN_PREFIX), "{token}");
    assert_eq!(token.len(), TOKEN_PREFIX.len() + 64);
    assert!(token[4..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(info.prefix, token[..8]);
    assert_eq!(info.scopes, vec![Scope::Read, Scope::Write]);
    assert_eq!(
        (info.user_email.as_str(), info.name.as_deref()),
        ("ana@example.com", Some("ci"))
    );
    let listed = list_tokens(&p.store, Some("ANA@example.com"))
        .await
        .unwrap();
    assert_eq!(listed, vec![info.clone()]);
    // The store holds the hash, not the token.
    let mut conn = sqlx::AnyConnection::connect(&p.raw_url()).await.unwrap();
    let hashes: Vec<String> =
        sqlx::query_scalar::<sqlx::Any, String>("SELECT hash FROM api_tokens")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    assert_eq!(hashes, vec![secret_hash(&token)]);

    // Use is noted, at most once a minute.
    let who = p.principal(&token).await.unwrap();
    assert_eq!(
        who.via,
        AuthVia::Token {
            id: info.id.clone()
        }
    );
    let used = list_tokens(&p.store, None).await.unwrap()[0].last_used_at;
    assert_eq!(used, Some(T0));
    p.clock.advance(Duration::from_secs(10));
    p.principal(&token).await.unwrap();
    assert_eq!(
        list_tokens(&p.store, None).await.unwrap()[0].last_used_at,
        Some(T0)
    );

    // Not tokens, or unknown ones, do not authenticate.
    assert_eq!(p.principal("").await, None);
    assert_eq!(p.principal("hunter2").await, None);
    assert_eq!(p.principal(&format!("{token}0")).await, None);

    // Errors tell what to do.
    let err = create_token(&p.store, "nobody@example.com", &[Scope::Read], None, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no user nobody@example.com; add one with `maestro users add nobody@example.com`"
    );
    let err = create_token(&p.store, "ana@example.com", &[], None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, AccessError::NoScopes), "{err}");
    let err = "delete".parse::<Scope>().unwrap_err().to_string();
    assert!(err.contains("read, write and admin"), "{err}");
    assert_eq!(
        Scope::parse_list("write, read").unwrap(),
        vec![Scope::Read, Scope::Write]
    );
    assert_eq!(Scope::Admin.to_string(), "admin");
    let err = add_user(&p.store, "ana@example.com", true)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("maestro users set-role ana@example.com"),
        "{err}"
    );
    assert!(matches!(
        add_user(&p.store, "not-an-email", false).await.unwrap_err(),
        AccessError::BadEmail { .. }
    ));
}

#[tokio::test]
async fn a_disabled_user_is_refused_everywhere_until_enabled() {
    let p = Project::new().await;
    let bob = add_user(&p.store, "bob@example.com", false).await.unwrap();
    let token = p.token("bob@example.com", &[Scope::Write]).await;
    let session = create_session(&p.store, &bob.id, HOUR).await.unwrap();
    set_role(&p.store, "bob@example.com", Role::Disabled)
        .await
        .unwrap();

    assert_eq!(p.principal(&token).await, None);
    assert_eq!(
        session_principal(&p.store, session.id.expose())
            .await
            .unwrap(),
        None
    );
    let err = login_user(&p.store, "bob@example.com", &["bob@example.com".into()])
        .await
        .unwrap_err();
    assert!(matches!(err, AccessError::Disabled { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("maestro users set-role bob@example.com user"),
        "{err}"
    );
    assert!(matches!(
        create_token(&p.store, "bob@example.com", &[Scope::Read], None, None).await,
        Err(AccessError::Disabled { .. })
    ));
    assert!(matches!(
        create_session(&p.store, &bob.id, HOUR).await,
        Err(AccessError::Disabled { .. })
    ));

    set_role(&p.store, "bob@example.com", Role::User)
        .await
        .unwrap();
    assert!(p.principal(&token).await.unwrap().can(Scope::Write));
}

#[tokio::test]
async fn tokens_sessions_and_shares_expire() {
    let p = Project::new().await;
    let cy = add_user(&p.store, "cy@example.com", false).await.unwrap();
    let (_, token) = create_token(&p.store, "cy@example.com", &[Scope::Read], None, Some(HOUR))
        .await
        .unwrap();
    let session = create_session(&p.store, &cy.id, HOUR).await.unwrap();
    assert_eq!(session.expires_at, T0 + HOUR);
    let job = submit_job(&p, Some("cy@example.com")).await;
    let (share, link) = create_share(&p.store, job, "cy@example.com", Some(HOUR))
        .await
        .unwrap();
    assert_eq!(share.expires_at, Some(T0 + HOUR));

    p.clock.advance(HOUR - Duration::from_secs(1));
    assert!(p.principal(token.expose()).await.is_some());
    assert!(
        session_principal(&p.store, session.id.expose())
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        resolve_share(&p.store, link.expose()).await.unwrap(),
        Some(job)
    );

    p.clock.advance(Duration::from_secs(1));
    assert_eq!(p.principal(token.expose()).await, None);
    assert_eq!(
        session_principal(&p.store, session.id.expose())
            .await
            .unwrap(),
        None
    );
    assert_eq!(resolve_share(&p.store, link.expose()).await.unwrap(), None);
}

#[tokio::test]
async fn revoked_tokens_shares_and_ended_sessions_stop_at_once() {
    let p = Project::new().await;
    let dee = add_user(&p.store, "dee@example.com", false).await.unwrap();
    let (info, token) = create_token(&p.store, "dee@example.com", &[Scope::Read], None, None)
        .await
        .unwrap();
    assert!(p.principal(token.expose()).await.is_some());
    revoke_token(&p.store, &info.id).await.unwrap();
    assert_eq!(p.principal(token.expose()).await, None);
    assert!(list_tokens(&p.store, None).await.unwrap()[0].revoked);
    let err = revoke_token(&p.store, "no-such-id").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "no API token with id no-such-id; `maestro tokens list` shows the ids"
    );

    let job = submit_job(&p, None).await;
    let (share, link) = create_share(&p.store, job, "dee@example.com", None)
        .await
        .unwrap();
    assert!(link.expose().starts_with("mss_"));
    assert_eq!(
        resolve_share(&p.store, link.expose()).await.unwrap(),
        Some(job)
    );
    assert_eq!(resolve_share(&p.store, "mss_nope").await.unwrap(), None);
    revoke_share(&p.store, &share.id).await.unwrap();
    assert_eq!(resolve_share(&p.store, link.expose()).await.unwrap(), None);
    assert!(list_shares(&p.store, job).await.unwrap()[0].revoked);
    assert!(matches!(
        revoke_share(&p.store, "nope").await,
        Err(AccessError::NoSuchShare { .. })
    ));
    assert!(matches!(
        create_share(&p.store, maestro_app::JobId::new(), "dee", None).await,
        Err(AccessError::NoSuchJob(_))
    ));

    let session = create_session(&p.store, &dee.id, HOUR).await.unwrap();
    let (_, csrf) = session_principal(&p.store, session.id.expose())
        .await
        .unwrap()
        .unwrap();
    assert!(csrf.verify(session.csrf.expose()));
    assert!(!csrf.verify(session.id.expose()));
    assert!(!csrf.verify(""));
    assert_eq!(format!("{csrf:?}"), "SessionCsrf(***)");
    end_session(&p.store, session.id.expose()).await.unwrap();
    assert_eq!(
        session_principal(&p.store, session.id.expose())
            .await
            .unwrap(),
        None
    );
    // Ending it again is not an error.
    end_session(&p.store, session.id.expose()).await.unwrap();

    let actions: Vec<AuditAction> = audit_log(&p.store, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        vec![
            AuditAction::UserAdded,
            AuditAction::TokenCreated,
            AuditAction::TokenRevoked,
            AuditAction::Submit,
            AuditAction::ShareCreated,
            AuditAction::ShareRevoked,
            AuditAction::Login,
            AuditAction::Logout,
        ]
    );
    // No secret reached the audit log.
    for entry in audit_log(&p.store, None, 100).await.unwrap() {
        let detail = entry.detail.unwrap_or_default();
        for secret in [token.expose(), link.expose(), session.id.expose()] {
            assert!(!detail.contains(secret), "{detail}");
        }
    }
}

#[tokio::test]
async fn a_login_in_flight_is_taken_once_and_login_user_finds_or_adds() {
    let p = Project::new().await;
    begin_login(
        &p.store,
        "state-1",
        "verifier-1",
        "nonce-1",
        Some("/jobs".into()),
        HOUR,
    )
    .await
    .unwrap();
    let pending = take_login(&p.store, "state-1").await.unwrap().unwrap();
    assert_eq!(pending.verifier.expose(), "verifier-1");
    assert_eq!(
        (pending.nonce.as_str(), pending.redirect_to.as_deref()),
        ("nonce-1", Some("/jobs"))
    );
    assert_eq!(take_login(&p.store, "state-1").await.unwrap(), None);
    assert_eq!(take_login(&p.store, "never-begun").await.unwrap(), None);
    begin_login(
        &p.store,
        "state-2",
        "v",
        "n",
        None,
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    p.clock.advance(Duration::from_secs(600));
    assert_eq!(take_login(&p.store, "state-2").await.unwrap(), None);

    let admins = vec!["Boss@Example.com".to_string()];
    let eve = login_user(&p.store, "eve@example.com", &admins)
        .await
        .unwrap();
    assert_eq!(eve.role, Role::User);
    assert_eq!(
        login_user(&p.store, "EVE@example.com", &admins)
            .await
            .unwrap()
            .id,
        eve.id
    );
    let boss = login_user(&p.store, "boss@example.com", &admins)
        .await
        .unwrap();
    assert_eq!(boss.role, Role::Admin);
    // A user listed as admin later is raised at their next sign-in.
    let raised = login_user(&p.store, "eve@example.com", &["eve@example.com".into()])
        .await
        .unwrap();
    assert_eq!((raised.id, raised.role), (eve.id, Role::Admin));
    let emails: Vec<String> = list_users(&p.store)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.email)
        .collect();
    assert_eq!(emails, vec!["boss@example.com", "eve@example.com"]);
}

async fn submit_job(p: &Project, owner: Option<&str>) -> maestro_app::JobId {
    submit(
        &p.store,
        &Config::default(),
        Submission {
            piece: p.piece(),
            task: "work".into(),
            workspace: None,
            class: None,
            priority: 0,
            max_attempts: None,
            submitted_by: "alice".into(),
            owner: owner.map(str::to_string),
            inputs: Vec::new(),
            budget: Default::default(),
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn children_and_scheduled_jobs_inherit_their_owner() {
    let p = Project::new().await;
    let parent = submit_job(&p, Some("fay@example.com")).await;
    assert_eq!(
        show_job(&p.store, parent).await.unwrap().owner.as_deref(),
        Some("fay@example.com")
    );
    let claimed = p
        .store
        .claim("w", &Classes::Any, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let Spawned::Created(child) = p
        .store
        .spawn_child(
            &claimed.lease,
            NewChild {
                key: "a".into(),
                title: "a".into(),
                piece: p.piece(),
                task: "child".into(),
                parent_workspace: None,
                max_children: 3,
                max_attempts: 3,
            },
        )
        .await
        .unwrap()
    else {
        panic!("no child")
    };
    let shown = show_job(&p.store, child.id).await.unwrap();
    assert_eq!(shown.owner.as_deref(), Some("fay@example.com"));
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["owner"], serde_json::json!("fay@example.com"));

    let schedule = add_schedule(
        &p.store,
        &Config::default(),
        ScheduleRequest {
            piece: p.piece(),
            task: "nightly".into(),
            spec: Spec::every("10s").unwrap(),
            tz: "UTC".into(),
            misfire: Misfire::Skip,
            created_by: "gus".into(),
            owner: Some("gus@example.com".into()),
        },
    )
    .await
    .unwrap();
    p.clock.advance(Duration::from_secs(10));
    let report = tick(&p.store, p.store.now(), GRACE).await.unwrap();
    assert_eq!(report.fired, 1, "{report:?}");
    let fired: Vec<_> = p
        .store
        .jobs(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.schedule_id.as_deref() == Some(schedule.as_str()))
        .collect();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].owner.as_deref(), Some("gus@example.com"));
    // A job from the command line belongs to nobody.
    let nobodys = submit_job(&p, None).await;
    assert_eq!(show_job(&p.store, nobodys).await.unwrap().owner, None);
    // A user's list holds their jobs only.
    let fays: Vec<_> = list_jobs_of(&p.store, "Fay@example.com", None)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(fays, vec![parent, child.id]);
    let guss = list_jobs_of(
        &p.store,
        "gus@example.com",
        Some(maestro_app::JobStatus::Queued),
    )
    .await
    .unwrap();
    assert_eq!(guss.len(), 1);
}

#[tokio::test]
async fn an_unknown_audit_action_is_shown_and_the_log_pages_on() {
    let p = Project::new().await;
    record_audit(
        &p.store,
        "hal",
        AuditAction::ConfigChanged,
        None,
        Some("llm.model".into()),
    )
    .await
    .unwrap();
    let mut conn = sqlx::AnyConnection::connect(&p.raw_url()).await.unwrap();
    sqlx::query::<sqlx::Any>(
        "INSERT INTO audit_log (at, actor, action) VALUES (1, 'newer-build', 'quantum_leap')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    record_audit(&p.store, "hal", AuditAction::PieceChanged, None, None)
        .await
        .unwrap();
    let first = audit_log(&p.store, None, 2).await.unwrap();
    assert_eq!(
        first.iter().map(|e| e.action.clone()).collect::<Vec<_>>(),
        vec![
            AuditAction::ConfigChanged,
            AuditAction::Unknown("quantum_leap".into())
        ]
    );
    assert_eq!(first[1].action.to_string(), "quantum_leap");
    let rest = audit_log(&p.store, Some(first[1].id), 2).await.unwrap();
    assert_eq!(
        rest.iter().map(|e| e.action.clone()).collect::<Vec<_>>(),
        vec![AuditAction::PieceChanged]
    );
}
