//! Users, tokens, sessions, logins in flight, share links, owners and the audit log, on SQLite
//! and on a real PostgreSQL cluster.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Db;
use maestro_store::{
    AuditAction, Classes, JobQueue, JobStatus, ManualClock, NewChild, NewJob, NewSchedule,
    NewToken, Outcome, Spawned, StoredLogin, secret_hash,
};
use pretty_assertions::assert_eq;
use sqlx::Connection;
use time::OffsetDateTime;

on_both_backends!(
    users_are_unique_by_lowercased_email_and_audited,
    tokens_are_found_by_hash_touched_and_revoked,
    sessions_expire_and_end,
    a_login_in_flight_is_taken_once,
    share_links_are_found_by_hash_and_revoked,
    children_and_scheduled_jobs_take_their_owner,
    an_unknown_audit_action_reads_back_as_unknown,
    the_audit_log_pages_oldest_first_by_cursor,
    the_audit_log_pages_newest_first_by_cursor,
);

async fn users_are_unique_by_lowercased_email_and_audited(db: Db) {
    let store = db.open().await;
    let alice = store
        .insert_user(" Alice@Example.COM", "admin", "cli")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (alice.email.as_str(), alice.role.as_str()),
        ("alice@example.com", "admin")
    );
    assert_eq!(
        store
            .insert_user("alice@example.com", "user", "cli")
            .await
            .unwrap(),
        None
    );
    let found = store
        .user_by_email("ALICE@example.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, alice.id);
    let changed = store
        .set_user_role("alice@example.com", "disabled", "root")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed.role, "disabled");
    assert_eq!(
        store
            .set_user_role("nobody@example.com", "user", "root")
            .await
            .unwrap(),
        None
    );
    let actions: Vec<_> = store
        .audit_log(None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.actor, e.action))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("cli".to_string(), AuditAction::UserAdded),
            ("root".to_string(), AuditAction::UserRoleChanged)
        ]
    );
}

async fn tokens_are_found_by_hash_touched_and_revoked(db: Db) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = db.open().await.with_clock(clock.clone());
    let bob = store
        .insert_user("bob@example.com", "user", "cli")
        .await
        .unwrap()
        .unwrap();
    let token = store
        .insert_token(
            &NewToken {
                user_id: bob.id.clone(),
                name: Some("ci".into()),
                hash: secret_hash("mst_secret"),
                prefix: "mst_secr".into(),
                scopes: "read,write".into(),
                expires_at: None,
            },
            "cli",
        )
        .await
        .unwrap();
    assert_eq!(token.user_email, "bob@example.com");
    assert_eq!(token.last_used_at, None);
    let (found, user) = store
        .token_by_hash(&secret_hash("mst_secret"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.id.as_str(), user.id.as_str()),
        (token.id.as_str(), bob.id.as_str())
    );
    assert!(
        store
            .token_by_hash(&secret_hash("mst_other"))
            .await
            .unwrap()
            .is_none()
    );

    // The first use is noted; a second within the minute is not; one after it is.
    store.touch_token(&token.id).await.unwrap();
    let first = store.tokens(None).await.unwrap()[0].last_used_at.unwrap();
    clock.advance(Duration::from_secs(30));
    store.touch_token(&token.id).await.unwrap();
    assert_eq!(
        store.tokens(None).await.unwrap()[0].last_used_at,
        Some(first)
    );
    clock.advance(Duration::from_secs(31));
    store.touch_token(&token.id).await.unwrap();
    assert!(store.tokens(None).await.unwrap()[0].last_used_at.unwrap() > first);

    assert!(store.revoke_token(&token.id, "cli").await.unwrap());
    assert!(!store.revoke_token("no-such-token", "cli").await.unwrap());
    let listed = store.tokens(Some(&bob.id)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].revoked_at.is_some());
    assert!(store.tokens(Some("someone-else")).await.unwrap().is_empty());
    // The hash is stored, never the token.
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    let stored: String = sqlx::query_scalar::<sqlx::Any, String>("SELECT hash FROM api_tokens")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, secret_hash("mst_secret"));
    assert!(!stored.contains("mst_secret"));
    conn.close().await.unwrap();
}

async fn sessions_expire_and_end(db: Db) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = db.open().await.with_clock(clock.clone());
    let carol = store
        .insert_user("carol@example.com", "user", "cli")
        .await
        .unwrap()
        .unwrap();
    let expires = store.now() + time::Duration::hours(1);
    store
        .insert_session("id-hash", &carol.id, "csrf-hash", expires)
        .await
        .unwrap();
    let session = store.session_by_hash("id-hash").await.unwrap().unwrap();
    assert_eq!(
        (session.user_id.as_str(), session.csrf_hash.as_str()),
        (carol.id.as_str(), "csrf-hash")
    );
    clock.advance(Duration::from_secs(3601));
    assert_eq!(store.session_by_hash("id-hash").await.unwrap(), None);

    store
        .insert_session(
            "second",
            &carol.id,
            "csrf-2",
            store.now() + time::Duration::hours(1),
        )
        .await
        .unwrap();
    assert!(store.delete_session("second").await.unwrap());
    assert!(!store.delete_session("second").await.unwrap());
    assert_eq!(store.session_by_hash("second").await.unwrap(), None);
}

async fn a_login_in_flight_is_taken_once(db: Db) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let a = db.open().await.with_clock(clock.clone());
    let b = db.open().await.with_clock(clock.clone());
    let login = StoredLogin {
        pkce_verifier: "verifier".into(),
        nonce: "nonce".into(),
        redirect_to: Some("/jobs".into()),
        expires_at: a.now() + time::Duration::minutes(10),
    };
    a.insert_login("state-1", &login).await.unwrap();
    // Two nodes finishing the same login: one gets it.
    let (ta, tb) = tokio::join!(a.take_login("state-1"), b.take_login("state-1"));
    let taken: Vec<_> = [ta.unwrap(), tb.unwrap()].into_iter().flatten().collect();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].pkce_verifier, "verifier");
    assert_eq!(taken[0].redirect_to.as_deref(), Some("/jobs"));

    a.insert_login("state-2", &login).await.unwrap();
    clock.advance(Duration::from_secs(601));
    assert_eq!(a.take_login("state-2").await.unwrap(), None);
}

async fn share_links_are_found_by_hash_and_revoked(db: Db) {
    let store = db.open().await;
    let job = store
        .submit(NewJob::new("default", "shared", "alice"))
        .await
        .unwrap();
    let share = store
        .insert_share(job, &secret_hash("shr_x"), "alice", None)
        .await
        .unwrap();
    assert_eq!(store.shares(job).await.unwrap(), vec![share.clone()]);
    let found = store
        .share_by_hash(&secret_hash("shr_x"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.id.as_str(), found.job_id), (share.id.as_str(), job));
    assert!(store.revoke_share(&share.id, "alice").await.unwrap());
    // Revoking it again is no error, and changes (and audits) nothing more.
    assert!(store.revoke_share(&share.id, "bob").await.unwrap());
    assert!(!store.revoke_share("nope", "alice").await.unwrap());
    assert!(
        store
            .share_by_hash(&secret_hash("shr_x"))
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    );
    let actions: Vec<_> = store
        .audit_log(Some(job))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        vec![
            AuditAction::Submit,
            AuditAction::ShareCreated,
            AuditAction::ShareRevoked
        ]
    );
}

async fn children_and_scheduled_jobs_take_their_owner(db: Db) {
    let store = db.open().await;
    let mut parent = NewJob::new("default", "parent", "alice");
    parent.owner = Some("alice@example.com".into());
    let parent = store.submit(parent).await.unwrap();
    store
        .submit(NewJob::new("default", "nobody's", "bob"))
        .await
        .unwrap();
    let claimed = store
        .claim("w", &Classes::Any, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.job.id, parent);
    let spawned = store
        .spawn_child(
            &claimed.lease,
            NewChild {
                key: "k".into(),
                title: "child".into(),
                piece: "default".into(),
                task: "child task".into(),
                parent_workspace: None,
                max_children: 5,
                max_attempts: 3,
            },
        )
        .await
        .unwrap();
    let Spawned::Created(child) = spawned else {
        panic!("{spawned:?}")
    };
    assert_eq!(child.owner.as_deref(), Some("alice@example.com"));
    store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::WaitingSubtasks,
                result: None,
                reason: None,
            },
        )
        .await
        .unwrap();

    let schedule = store
        .add_schedule(&NewSchedule {
            piece: "default".into(),
            task: "nightly".into(),
            spec: "daily 02:00".into(),
            tz: "UTC".into(),
            misfire: "skip".into(),
            created_by: "dave".into(),
            owner: Some("dave@example.com".into()),
        })
        .await
        .unwrap();
    assert_eq!(
        store.schedules().await.unwrap()[0].owner.as_deref(),
        Some("dave@example.com")
    );
    let fired = store
        .fire_slot(
            &schedule,
            OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000),
            &NewJob::new("default", "nightly", "scheduler"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.job(fired).await.unwrap().unwrap().owner.as_deref(),
        Some("dave@example.com")
    );

    let alices: Vec<_> = store
        .jobs_of("alice@example.com", None)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(alices, vec![parent, child.id]);
    let queued: Vec<_> = store
        .jobs_of("alice@example.com", Some(JobStatus::Queued))
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(queued, vec![child.id]);
    assert_eq!(
        store.jobs_of("dave@example.com", None).await.unwrap().len(),
        1
    );
}

async fn an_unknown_audit_action_reads_back_as_unknown(db: Db) {
    let store = db.open().await;
    let job = store
        .submit(NewJob::new("default", "audited", "alice"))
        .await
        .unwrap();
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    sqlx::query::<sqlx::Any>(
        "INSERT INTO audit_log (at, actor, action, job_id) VALUES (5, 'future', 'teleport', $1)",
    )
    .bind(job.to_string())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    store
        .record_audit("alice", AuditAction::Logout, None, None)
        .await
        .unwrap();
    let entries = store.audit_log(None).await.unwrap();
    let actions: Vec<_> = entries.iter().map(|e| e.action.clone()).collect();
    assert_eq!(
        actions,
        vec![
            AuditAction::Submit,
            AuditAction::Unknown("teleport".into()),
            AuditAction::Logout
        ]
    );
    assert_eq!(entries[1].action.as_str(), "teleport");
    assert_eq!(
        serde_json::to_value(&entries[1]).unwrap()["action"],
        serde_json::json!("teleport")
    );
    assert_eq!(store.audit_page(None, 10).await.unwrap().len(), 3);
}

async fn the_audit_log_pages_oldest_first_by_cursor(db: Db) {
    let store = db.open().await;
    for i in 0..5 {
        store
            .record_audit(&format!("actor-{i}"), AuditAction::Login, None, None)
            .await
            .unwrap();
    }
    let first = store.audit_page(None, 2).await.unwrap();
    let actors: Vec<_> = first.iter().map(|e| e.actor.as_str()).collect();
    assert_eq!(actors, vec!["actor-0", "actor-1"]);
    let second = store.audit_page(Some(first[1].id), 2).await.unwrap();
    let actors: Vec<_> = second.iter().map(|e| e.actor.as_str()).collect();
    assert_eq!(actors, vec!["actor-2", "actor-3"]);
    let last = store.audit_page(Some(second[1].id), 2).await.unwrap();
    assert_eq!(last.len(), 1);
    assert!(
        store
            .audit_page(Some(last[0].id), 2)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_audit_log_pages_newest_first_by_cursor(db: Db) {
    let store = db.open().await;
    assert!(store.audit_page_newest(None, 2).await.unwrap().is_empty());
    for i in 0..5 {
        store
            .record_audit(&format!("actor-{i}"), AuditAction::Login, None, None)
            .await
            .unwrap();
    }
    let actors = |page: &[maestro_store::AuditEntry]| {
        page.iter().map(|e| e.actor.clone()).collect::<Vec<_>>()
    };
    let first = store.audit_page_newest(None, 2).await.unwrap();
    assert_eq!(actors(&first), vec!["actor-4", "actor-3"]);
    let second = store.audit_page_newest(Some(first[1].id), 2).await.unwrap();
    assert_eq!(actors(&second), vec!["actor-2", "actor-1"]);
    let last = store
        .audit_page_newest(Some(second[1].id), 2)
        .await
        .unwrap();
    assert_eq!(actors(&last), vec!["actor-0"]);
    assert!(
        store
            .audit_page_newest(Some(last[0].id), 2)
            .await
            .unwrap()
            .is_empty()
    );
}
