//! The piece classifier: one structured model call that picks the piece for a task from every
//! piece's name and description, with `triggers.keywords` as hints. "Nothing fits" is an answer
//! too, and becomes a clear error instead of a forced choice.

use maestro_llm::{ChatRequest, LlmError, Message, Provider, ResponseSchema};
use maestro_piece::Piece;
use serde_json::json;

use crate::event::{CallPurpose, RecordedAnswer, RunEvent};
use crate::judge::parse_json_object;

/// The `movement` the classifier's events carry: it runs for the job, before any movement.
pub(crate) const CLASSIFIER_MOVEMENT: &str = "";

/// What the classifier knows of a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceSummary {
    /// The piece's name, the value the classifier answers with.
    pub name: String,
    /// The piece's description, shown to the model as what the piece is for.
    pub description: String,
    /// The piece's `triggers.keywords`; those the task mentions are pointed out to the model.
    pub keywords: Vec<String>,
}

impl From<&Piece> for PieceSummary {
    fn from(piece: &Piece) -> Self {
        PieceSummary {
            name: piece.name.clone(),
            description: piece.description.clone(),
            keywords: piece.keywords.clone(),
        }
    }
}

/// The classifier's choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Classified {
    /// The name of the chosen piece, one of those offered.
    pub piece: String,
    /// Why the model chose it, in its words (may be empty).
    pub reason: String,
    /// The model call that chose it, as the run records it: its `llm_request` and
    /// `llm_response` (purpose `classifier`), for [`RunSpec::preamble`](crate::RunSpec).
    pub calls: Vec<RunEvent>,
}

/// Why [`classify`] chose no piece.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClassifyError {
    /// There was no piece to choose from: add piece files to a pieces directory, or name a
    /// piece instead of `auto`.
    #[error("no pieces to choose from; add piece files to a pieces directory or name a piece")]
    NoPieces,
    /// The model answered that no piece fits, or named a piece that was not offered.
    #[error(
        "no piece fits this task ({reason}); known pieces: {known}. Name one explicitly, or add a piece for it"
    )]
    NothingFits {
        /// The model's reason, or what it answered when it gave none.
        reason: String,
        /// The offered pieces' names, comma-separated.
        known: String,
    },
    /// The model's answer was not the JSON object asked for; it holds the answer verbatim.
    #[error("the classifier's answer cannot be read: {0}")]
    Unreadable(String),
    /// The model call itself failed (endpoint unreachable, refused, timed out).
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The job's budget has no room for the call, or could not be checked.
    #[error("the classifier's call was not made: {0}")]
    Spend(#[from] crate::SpendRefused),
}

const NONE: &str = "none";

/// Picks the piece for `task`.
pub async fn classify(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    pieces: &[PieceSummary],
) -> Result<Classified, ClassifyError> {
    classify_within(provider, model, task, pieces, None).await
}

/// [`classify`], its call reserved from `guard` first (the job's budget) and settled to what it
/// spent: a call that does not fit is not made ([`ClassifyError::Spend`]).
pub async fn classify_within(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    pieces: &[PieceSummary],
    guard: Option<&dyn crate::SpendGuard>,
) -> Result<Classified, ClassifyError> {
    if pieces.is_empty() {
        return Err(ClassifyError::NoPieces);
    }
    let names: Vec<&str> = pieces
        .iter()
        .map(|p| p.name.as_str())
        .chain([NONE])
        .collect();
    let lowered = task.to_lowercase();
    let listed: Vec<String> = pieces
        .iter()
        .map(|p| {
            let hits: Vec<&str> = p
                .keywords
                .iter()
                .filter(|k| lowered.contains(&k.to_lowercase()))
                .map(String::as_str)
                .collect();
            let mut line = format!("- `{}`: {}", p.name, p.description.trim());
            if !p.keywords.is_empty() {
                line.push_str(&format!(" (keywords: {})", p.keywords.join(", ")));
            }
            if !hits.is_empty() {
                line.push_str(&format!(" [the task mentions: {}]", hits.join(", ")));
            }
            line
        })
        .collect();
    let user = format!(
        "## Task\n{task}\n\n## Pieces\n{}\n\nWhich piece should run this task? Reply {{\"piece\": NAME, \"reason\": …}}; \
         use \"{NONE}\" when no piece fits.",
        listed.join("\n")
    );
    let mut request = ChatRequest {
        model: model.to_string(),
        messages: vec![
            Message::System {
                content: "You route tasks to the workflow (piece) best suited to them. Reply only with the JSON object asked for."
                    .into(),
            },
            Message::user(user),
        ],
        tools: Default::default(),
        response_schema: Some(ResponseSchema {
            name: "piece_choice".into(),
            schema: json!({
                "type": "object",
                "properties": {"piece": {"type": "string", "enum": names}, "reason": {"type": "string"}},
                "required": ["piece", "reason"],
                "additionalProperties": false
            }),
        }),
        temperature: Some(0.0),
        max_tokens: None,
        headers: Vec::new(),
    };
    let requested = request.model.clone();
    let mut calls = vec![RunEvent::LlmRequest {
        movement: CLASSIFIER_MOVEMENT.to_string(),
        purpose: CallPurpose::Classifier,
        messages: request.messages.len(),
        tools: request.tools.len(),
    }];
    let ticket = match guard {
        Some(guard) => Some(
            guard
                .reserve(crate::spend::ask_for(
                    CLASSIFIER_MOVEMENT,
                    CallPurpose::Classifier,
                    &request,
                ))
                .await?,
        ),
        None => None,
    };
    if let Some(cap) = ticket.as_ref().and_then(|t| t.answer_cap) {
        request.max_tokens = Some(cap);
    }
    let response = match provider.chat(request, &|_| {}).await {
        Ok(response) => {
            if let (Some(guard), Some(ticket)) = (guard, ticket) {
                let model = response.model.clone().unwrap_or_else(|| requested.clone());
                guard.settle(ticket, model, response.usage).await;
            }
            response
        }
        Err(e) => {
            if let (Some(guard), Some(ticket)) = (guard, ticket) {
                guard.release(ticket).await;
            }
            return Err(e.into());
        }
    };
    calls.push(RunEvent::LlmResponse {
        movement: CLASSIFIER_MOVEMENT.to_string(),
        purpose: CallPurpose::Classifier,
        model: Some(response.model.clone().unwrap_or(requested)),
        usage: response.usage,
        finish_reason: response.finish_reason.clone(),
        tool_calls: response.tool_calls.len(),
        text_chars: response.content.chars().count(),
        answer: Some(RecordedAnswer {
            content: response.content.clone(),
            tool_calls: Vec::new(),
        }),
    });
    let value = parse_json_object(&response.content)
        .ok_or_else(|| ClassifyError::Unreadable(response.content.clone()))?;
    let piece = value
        .get("piece")
        .and_then(|p| p.as_str())
        .unwrap_or(NONE)
        .to_string();
    let reason = value
        .get("reason")
        .and_then(|r| r.as_str())
        .unwrap_or("")
        .to_string();
    if piece == NONE || !pieces.iter().any(|p| p.name == piece) {
        let known = pieces
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let reason = if reason.is_empty() {
            format!("the model answered `{piece}`")
        } else {
            reason
        };
        return Err(ClassifyError::NothingFits { reason, known });
    }
    Ok(Classified {
        piece,
        reason,
        calls,
    })
}
