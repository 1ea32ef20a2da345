//! The graph dialect end to end over real HTTP: frontmatter picks the edge, edge prompts carry
//! the fields, invalid frontmatter is asked again twice, `$END` completes.

use crate::support;

use maestro_engine::RunEvent;
use maestro_piece::{Condition, Dialect, Movement, Piece, Rule};
use maestro_testkit::Turn;
use serde_json::json;
use support::*;

fn edge(status: &str, to: &str, prompt: &str) -> Rule {
    Rule {
        prompt: Some(prompt.into()),
        ..rule_if(Condition::Status(status.into()), Some(to))
    }
}

fn role(name: &str, rules: Vec<Rule>) -> Movement {
    let mut role = mv(name, rules);
    role.allowed_tools = vec![];
    role.frontmatter_schema = Some(json!({
        "type": "object",
        "properties": {"$status": {"enum": ["continue", "conceded"]}, "argument": {"type": "string"}},
        "required": ["$status", "argument"]
    }));
    role
}

fn debate() -> Piece {
    let mut p = piece(
        Dialect::Graph,
        vec![
            role(
                "against",
                vec![
                    edge("conceded", "$END", "The against side conceded."),
                    edge(
                        "continue",
                        "for",
                        "Counter the opposing argument: {{{argument}}}",
                    ),
                ],
            ),
            role(
                "for",
                vec![
                    edge("conceded", "$END", "The for side conceded."),
                    edge(
                        "continue",
                        "against",
                        "Counter the opposing argument: {{{argument}}}",
                    ),
                ],
            ),
        ],
    );
    p.start_prompt = Some("Present your opening argument against the proposition.".into());
    p.max_movements = 50;
    p
}

#[tokio::test]
async fn frontmatter_status_routes_and_the_edge_prompt_carries_the_fields() {
    let ran = run(
        debate(),
        vec![
            Turn::text(
                "---\n$status: continue\nargument: Soup is not a meal.\n---\nThat is my case.",
            ),
            Turn::text("---\n$status: conceded\nargument: You convinced me.\n---\n"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert!(
        ran.request_text(0)
            .contains("Present your opening argument"),
        "{}",
        ran.request_text(0)
    );
    assert!(
        ran.request_text(1)
            .contains("Counter the opposing argument: Soup is not a meal."),
        "{}",
        ran.request_text(1)
    );
    let nexts: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished { next, .. } => Some(next.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(nexts, vec!["for", "COMPLETE"]);
}

#[tokio::test]
async fn invalid_frontmatter_is_asked_again_in_the_same_conversation() {
    let ran = run(
        debate(),
        vec![
            Turn::text("I refuse to use frontmatter."),
            Turn::text("---\n$status: maybe\n---\n"),
            Turn::text("---\n$status: conceded\nargument: Fine.\n---\n"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.count("reminder"), 2);
    let third = &ran.requests()[2];
    // the same conversation: the earlier answers are in it, and the request says what is wrong
    assert!(messages_text(third).contains("I refuse to use frontmatter."));
    let ask = last_user_text(third);
    assert!(ask.contains("argument") && ask.contains("$status"), "{ask}");
}

#[tokio::test]
async fn frontmatter_still_invalid_after_two_retries_fails_the_run() {
    let ran = run(
        debate(),
        vec![
            Turn::text("no"),
            Turn::text("still no"),
            Turn::text("never"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    assert!(reason.unwrap().starts_with("invalid_frontmatter"));
    assert_eq!(ran.requests().len(), 3);
}

#[tokio::test]
async fn retries_are_constrained_to_the_roles_schema_and_accept_a_json_answer() {
    let ran = run(
        debate(),
        vec![
            Turn::text("I will argue freely, without any frontmatter."),
            Turn::text(r#"{"$status": "conceded", "argument": "Fair point."}"#),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let requests = ran.requests();
    assert_eq!(requests.len(), 2);
    // the first answer is free; the retry asks for the role's schema through structured output
    assert!(requests[0].get("response_format").is_none());
    let format = &requests[1]["response_format"];
    assert_eq!(format["type"], "json_schema");
    let schema = &format["json_schema"]["schema"];
    assert!(
        schema.to_string().contains("conceded") && schema.to_string().contains("argument"),
        "{schema}"
    );
}

#[tokio::test]
async fn an_endpoint_refusing_a_too_long_request_ends_the_run_as_context_exhausted() {
    let ran = run(
        debate(),
        vec![Turn::http_error(
            400,
            r#"{"error":{"code":400,"message":"request (4173 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
        )],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "aborted");
    assert_eq!(reason.as_deref(), Some("context_exhausted"));
}
