//! The OpenAPI 3.1 document, generated from the handlers (`utoipa`): served at
//! `/api/v1/openapi.json`, with a committed copy (`openapi.json` in this crate) that a test
//! holds it to.

use utoipa::OpenApi;

/// The document's frame; the routes add their paths (`router::api`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Maestro",
        description = "The job system of Maestro over HTTP: submit tasks, follow their runs live, \
            answer their questions, download what they made. Errors are \
            `application/problem+json`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "jobs", description = "Jobs, their events, comments and files"),
        (name = "schedules", description = "Schedules that fire jobs"),
        (name = "knowledge", description = "The knowledge base: documents and hybrid search"),
        (name = "system", description = "Tools and workers"),
        (name = "pieces", description = "Pieces: the pieces directories' and the store's"),
        (name = "config", description = "The configuration, changed at runtime"),
        (name = "auth", description = "Logging in and out, and who the caller is"),
        (name = "admin", description = "Users, API tokens and the audit log (admin scope)"),
        (name = "gateway", description = "The LLM gateway's virtual keys and usage (admin scope)"),
        (name = "share", description = "Share links: one job, read-only, without credentials"),
        (name = "operations", description = "Health, readiness and metrics"),
    ),
)]
pub(crate) struct ApiDoc;

/// The shapes the API answers with, as the document describes them. The handlers answer with
/// `maestro-app`'s types; a test holds these to what those serialise to.
pub(crate) mod schema {
    #![allow(dead_code)]

    use utoipa::ToSchema;

    /// An error (RFC 9457).
    #[derive(ToSchema)]
    pub(crate) struct Problem {
        /// Always `about:blank`.
        r#type: String,
        /// The status's reason phrase.
        title: String,
        /// The HTTP status.
        status: u16,
        /// What went wrong and what to do about it.
        detail: String,
        /// For a field at fault, its path in the body.
        field: Option<String>,
    }

    /// Tokens a run used.
    #[derive(ToSchema)]
    pub(crate) struct Usage {
        prompt_tokens: u64,
        completion_tokens: u64,
        total_tokens: u64,
    }

    /// How a run ended or parked.
    #[derive(ToSchema)]
    pub(crate) struct JobResult {
        /// The run's id (its record's name).
        run_id: String,
        /// `completed`, `aborted`, `exceeded`, `failed`, `needs_user_input`,
        /// `waiting_subtasks`.
        status: String,
        /// The text the run ended with: its answer, or why it ended so.
        result: Option<String>,
        /// The tokens it used.
        usage: Option<Usage>,
        /// `result` rendered from Markdown and sanitised (no script, handler or style): safe to
        /// put into a page.
        html: Option<String>,
    }

    /// A job.
    #[derive(ToSchema)]
    pub(crate) struct Job {
        /// A UUIDv7: ids sort by submission time.
        id: String,
        /// `queued`, `running`, `waiting_input`, `waiting_subtasks`, `completed`, `aborted`,
        /// `exceeded`, `failed`, `cancelled`.
        status: String,
        /// The piece as submitted: a name or `auto`.
        piece: String,
        /// The job that spawned it, for a subtask.
        parent_id: Option<String>,
        /// Claims so far.
        attempt: i64,
        /// RFC 3339.
        created_at: String,
        /// RFC 3339.
        updated_at: String,
        /// How the run ended or parked, once it has.
        result: Option<JobResult>,
        /// Why it ended other than by its run's outcome, or why its last attempt failed.
        reason: Option<String>,
        /// The open question of a job waiting for input.
        question: Option<String>,
        /// The question rendered from Markdown and sanitised.
        question_html: Option<String>,
        /// The schedule that fired it.
        schedule_id: Option<String>,
        /// The slot it was fired for (RFC 3339).
        scheduled_for: Option<String>,
        /// A subtask's title.
        title: Option<String>,
        /// Levels below the submitted job it descends from.
        depth: i64,
        /// The user it belongs to (an e-mail address); absent without auth.
        owner: Option<String>,
        /// The task.
        task: String,
        /// Higher runs first.
        priority: i64,
        /// The task class.
        class: String,
        /// The tokens of the job's own model calls: from its record for one job, as of the
        /// run's last end or park in a page of jobs.
        usage: Usage,
        /// One job only (absent in pages of jobs): what its calls cost in US dollars; null
        /// when a model has no price (never counted as 0).
        cost_usd: Option<f64>,
        /// One job only (absent in pages of jobs): the tokens of the job and every subtask
        /// under it.
        tree_usage: Option<Usage>,
        /// One job only (absent in pages of jobs): what the tree's calls cost in US dollars;
        /// null when any model has no price.
        tree_cost_usd: Option<f64>,
    }

    /// A page of jobs.
    #[derive(ToSchema)]
    pub(crate) struct JobPage {
        /// Newest first.
        jobs: Vec<Job>,
        /// The cursor of the next page; absent on the last.
        next_cursor: Option<String>,
    }

    /// The jobs a cancel stopped.
    #[derive(ToSchema)]
    pub(crate) struct Cancelled {
        /// The job and its descendants that were still going.
        cancelled: Vec<String>,
    }

    /// A schedule.
    #[derive(ToSchema)]
    pub(crate) struct Schedule {
        id: String,
        piece: String,
        task: String,
        /// When it fires, e.g. `cron 0 9 * * 1-5`, `every 30m`.
        spec: String,
        /// The zone its times are read in.
        tz: String,
        /// `skip` or `catch_up_once`.
        misfire: String,
        paused: bool,
        /// The next slot (RFC 3339); absent when paused or spent.
        next_fire: Option<String>,
        /// The next 5 slots (RFC 3339), `next_fire` first; fewer when the rule has fewer
        /// left, none when paused.
        next_fires: Vec<String>,
        /// Slots it fired a job for.
        fired: i64,
        /// Slots it let pass.
        missed: i64,
        /// The user it belongs to; absent without auth.
        owner: Option<String>,
    }

    /// A tool a run may be offered.
    #[derive(ToSchema)]
    pub(crate) struct Tool {
        name: String,
        description: String,
        /// Its input's JSON Schema.
        input_schema: serde_json::Value,
    }

    /// An MCP server that did not answer.
    #[derive(ToSchema)]
    pub(crate) struct Unavailable {
        server: String,
        reason: String,
    }

    /// The configured tools.
    #[derive(ToSchema)]
    pub(crate) struct Tools {
        tools: Vec<Tool>,
        unavailable: Vec<Unavailable>,
    }

    /// A live worker.
    #[derive(ToSchema)]
    pub(crate) struct WorkerEntry {
        id: String,
        name: String,
        profile: String,
        task_classes: Vec<String>,
        host: String,
        pid: i64,
        /// RFC 3339.
        started_at: String,
        /// RFC 3339.
        heartbeat_at: String,
        /// The jobs it runs now.
        running: Vec<String>,
    }

    /// The caller.
    #[derive(ToSchema)]
    pub(crate) struct Me {
        /// The user's e-mail address (`local` without auth).
        email: String,
        /// `admin`, `user` or `disabled`.
        role: String,
        /// What these credentials may do: `read`, `write`, `admin`.
        scopes: Vec<String>,
        /// `token`, `session` or `none` (auth is off).
        auth: String,
        /// Whether the server checks credentials.
        auth_enabled: bool,
        /// Whether `/auth/login` logs in through an OpenID provider.
        oidc: bool,
        /// With a session: the value cookie-authenticated writes send as `X-CSRF-Token`.
        csrf_token: Option<String>,
    }

    /// A user.
    #[derive(ToSchema)]
    pub(crate) struct User {
        id: String,
        email: String,
        /// `admin`, `user` or `disabled`.
        role: String,
        /// RFC 3339.
        created_at: String,
    }

    /// An API token, without the token.
    #[derive(ToSchema)]
    pub(crate) struct Token {
        id: String,
        user_email: String,
        name: Option<String>,
        /// The token's first characters, to recognise it by.
        prefix: String,
        scopes: Vec<String>,
        created_at: String,
        last_used_at: Option<String>,
        expires_at: Option<String>,
        revoked: bool,
    }

    /// A new API token: `token` is shown this once.
    #[derive(ToSchema)]
    pub(crate) struct NewToken {
        id: String,
        /// The token (`mst_…`); only its hash is kept.
        token: String,
        user_email: String,
        scopes: Vec<String>,
        expires_at: Option<String>,
    }

    /// An entry of the audit log.
    #[derive(ToSchema)]
    pub(crate) struct AuditEntry {
        id: i64,
        /// RFC 3339.
        at: String,
        actor: String,
        /// `submit`, `cancel`, `answer`, `token_created`, `login`, …; an action this build
        /// does not know is shown by its stored name.
        action: String,
        job_id: Option<String>,
        schedule_id: Option<String>,
        detail: Option<String>,
    }

    /// A gateway virtual key, without the key.
    #[derive(ToSchema)]
    pub(crate) struct GatewayKey {
        id: String,
        name: String,
        /// The key's first characters, to recognise it.
        prefix: String,
        /// The public models it may call; absent: every model.
        models: Option<Vec<String>>,
        budget_usd: Option<f64>,
        budget_tokens: Option<i64>,
        /// `day`, `week` or `month`; absent: the budgets are totals.
        period: Option<String>,
        rpm: Option<i64>,
        tpm: Option<i64>,
        /// RFC 3339.
        expires_at: Option<String>,
        /// RFC 3339.
        created_at: String,
        created_by: String,
        /// RFC 3339.
        revoked_at: Option<String>,
        /// `active`, `expired` or `revoked`.
        state: String,
    }

    /// A new gateway key: `key`, shown this once, and what lists show of it.
    #[derive(ToSchema)]
    pub(crate) struct NewGatewayKey {
        /// The key (`mk-…`): shown this once.
        key: String,
        id: String,
        name: String,
        prefix: String,
        models: Option<Vec<String>>,
        budget_usd: Option<f64>,
        budget_tokens: Option<i64>,
        period: Option<String>,
        rpm: Option<i64>,
        tpm: Option<i64>,
        expires_at: Option<String>,
        created_at: String,
        created_by: String,
        revoked_at: Option<String>,
        state: String,
    }

    /// The gateway's usage summed by one grouping.
    #[derive(ToSchema)]
    pub(crate) struct GatewayUsage {
        /// `key`, `model` or `job`.
        by: String,
        /// RFC 3339; absent: from the beginning.
        from: Option<String>,
        /// RFC 3339; absent: up to now.
        to: Option<String>,
        groups: Vec<GatewayUsageGroup>,
    }

    /// One group's usage.
    #[derive(ToSchema)]
    pub(crate) struct GatewayUsageGroup {
        /// The key's name, grouped by key.
        key: Option<String>,
        /// The public model, grouped by model.
        model: Option<String>,
        /// The job, grouped by job.
        job: Option<String>,
        requests: u64,
        prompt_tokens: u64,
        completion_tokens: u64,
        /// The cost of the priced requests.
        cost_usd: f64,
    }

    /// A page of the audit log.
    #[derive(ToSchema)]
    pub(crate) struct AuditPage {
        entries: Vec<AuditEntry>,
        /// The cursor of the next page; absent on the last.
        next_cursor: Option<i64>,
    }

    /// A new share link: `token` is shown this once.
    #[derive(ToSchema)]
    pub(crate) struct NewShare {
        /// `/share/{token}` (absolute when `auth.public_url` is set).
        url: String,
        token: String,
        /// The link's id, to revoke it.
        id: String,
        expires_at: Option<String>,
    }

    /// A share link, without its token.
    #[derive(ToSchema)]
    pub(crate) struct Share {
        id: String,
        job_id: String,
        created_by: String,
        created_at: String,
        expires_at: Option<String>,
        revoked: bool,
    }

    /// A shared job: nothing of any other job.
    #[derive(ToSchema)]
    pub(crate) struct SharedJob {
        id: String,
        status: String,
        piece: String,
        title: Option<String>,
        task: String,
        created_at: String,
        updated_at: String,
        result: Option<JobResult>,
        question: Option<String>,
        question_html: Option<String>,
        usage: Usage,
    }

    /// Where a piece comes from: `{"kind": "store", "version": 3}` or
    /// `{"kind": "dir", "path": "pieces/review.yaml"}`.
    #[derive(ToSchema)]
    pub(crate) struct PieceOrigin {
        /// `store` or `dir`.
        kind: String,
        /// For `store`: the version.
        version: Option<i64>,
        /// For `dir`: the file, relative (never a host path).
        path: Option<String>,
    }

    /// A piece in a list.
    #[derive(ToSchema)]
    pub(crate) struct PieceListing {
        name: String,
        description: String,
        origin: PieceOrigin,
        /// Its version in the store; absent for a piece file.
        version: Option<i64>,
    }

    /// A piece's text.
    #[derive(ToSchema)]
    pub(crate) struct Piece {
        name: String,
        /// Its YAML.
        yaml: String,
        origin: PieceOrigin,
    }

    /// A piece version written.
    #[derive(ToSchema)]
    pub(crate) struct PieceVersion {
        name: String,
        version: i64,
        created_by: String,
        /// RFC 3339.
        created_at: String,
    }

    /// One error in a piece, as `maestro validate --json` reports it.
    #[derive(ToSchema)]
    pub(crate) struct PieceError {
        /// The field path, e.g. `movements[1].rules[0].next`.
        path: String,
        /// 1-based; absent when the error has no position.
        line: Option<u32>,
        /// 1-based; absent when the error has no position.
        column: Option<u32>,
        message: String,
    }

    /// An invalid piece.
    #[derive(ToSchema)]
    pub(crate) struct PieceProblem {
        status: u16,
        detail: String,
        errors: Vec<PieceError>,
    }

    /// A valid piece.
    #[derive(ToSchema)]
    pub(crate) struct Valid {
        /// Always true.
        valid: bool,
        /// The piece's graph as loaded.
        graph: PieceGraph,
    }

    /// A piece's movements and transitions as loaded.
    #[derive(ToSchema)]
    pub(crate) struct PieceGraph {
        name: String,
        /// `maestro`, `takt` or `graph`.
        dialect: String,
        /// The movement a run starts with.
        initial_movement: String,
        /// Top-level movements in file order, each parallel parent followed by its
        /// sub-movements.
        movements: Vec<GraphMovement>,
        /// Every transition, in the order a run tries them.
        edges: Vec<GraphEdge>,
        /// The special targets some edge leads to: `COMPLETE`, `ABORT`, `ASK`,
        /// `WAIT_SUBTASKS`.
        targets: Vec<String>,
    }

    /// A movement of a piece's graph.
    #[derive(ToSchema)]
    pub(crate) struct GraphMovement {
        name: String,
        /// `movement`, `parallel` (a parallel parent) or `sub_movement`.
        kind: String,
        /// True for a parallel parent.
        parallel: bool,
        /// For a sub-movement, its parallel parent.
        parent: Option<String>,
        /// For a parallel parent, its sub-movements.
        sub_movements: Vec<String>,
        /// For a sub-movement, the outcomes it can report (its rules' conditions).
        outcomes: Vec<String>,
        /// Whether it may change files.
        edit: bool,
    }

    /// A transition of a piece's graph.
    #[derive(ToSchema)]
    pub(crate) struct GraphEdge {
        from: String,
        /// A movement, or `COMPLETE`, `ABORT`, `ASK`, `WAIT_SUBTASKS`.
        to: String,
        /// The rule's condition, tag or status as written; empty for `default_next`.
        label: String,
        /// `rule`, `aggregate` (a parallel parent's `all()` / `any()`), `default_next`,
        /// `loop_monitor` or `complete_tool` (the maestro `complete` tool, in every movement).
        kind: String,
        /// The rule's index in its movement's `rules`; absent for `default_next`.
        rule: Option<u32>,
        /// takt's `requires_user_input`: the run first asks the user, then goes on to `to`.
        requires_user_input: bool,
    }

    /// The prompts of a movement, as `maestro prompt` prints them.
    #[derive(ToSchema)]
    pub(crate) struct MovementPrompt {
        piece: String,
        movement: String,
        task: String,
        /// The system message.
        system: String,
        /// The first user message.
        user: String,
    }

    /// A job's file.
    #[derive(ToSchema)]
    pub(crate) struct JobFile {
        /// Relative, `/`-separated.
        path: String,
        /// `input` (uploaded with the job) or `output` (left by its run in `output/`).
        kind: String,
        /// Bytes.
        size: u64,
        /// RFC 3339.
        created_at: String,
    }

    /// A comment on a job.
    #[derive(ToSchema)]
    pub(crate) struct Comment {
        id: i64,
        job_id: String,
        author: String,
        /// `question`, `answer` or `note`.
        kind: String,
        body: String,
        /// RFC 3339.
        created_at: String,
    }
}

/// The document as served: wildcard segments written as plain parameters.
pub(crate) fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let paths = std::mem::take(&mut doc.paths.paths);
    for (path, item) in paths {
        doc.paths.paths.insert(path.replace("{*", "{"), item);
    }
    doc
}
