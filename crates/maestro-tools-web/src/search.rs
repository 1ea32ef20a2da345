//! `WebSearch`: a query against the configured SearXNG instance's JSON API.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use super::client::{WebClient, read_limited};
use super::guard::{HostLookup, HostPolicy};
use super::{SearchProvider, WebConfig, WebError};
use maestro_tools::{ToolContext, ToolOutput, TypedTool};

const DEFAULT_RESULTS: usize = 8;
const MAX_RESULTS: usize = 20;
const SNIPPET_CHARS: usize = 400;

pub(crate) struct WebSearch {
    backend: Option<(SearchProvider, WebClient)>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebSearchInput {
    /// search terms
    query: String,
    /// how many results to return (default 8)
    #[schemars(range(min = 1, max = MAX_RESULTS))]
    max_results: Option<usize>,
}

#[derive(Deserialize)]
struct SearxResponse {
    #[serde(default)]
    results: Vec<SearxResult>,
}

#[derive(Deserialize)]
struct SearxResult {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: String,
}

impl WebSearch {
    pub(crate) fn new(config: &WebConfig, lookup: Arc<dyn HostLookup>) -> Self {
        let backend = config.search.clone().map(|provider| {
            // The operator chose this instance, so its host is trusted even when it is local;
            // everything else (including redirects elsewhere) stays guarded.
            let mut policy = HostPolicy::new(config.allow_private, &config.allow_hosts);
            if let Ok(url) = url::Url::parse(&provider.searxng_url)
                && let Some(host) = url.host_str()
            {
                policy.allow(host);
            }
            let client = WebClient::with_policy(config, policy, lookup);
            (provider, client)
        });
        WebSearch { backend }
    }

    async fn search(&self, ctx: &ToolContext, input: WebSearchInput) -> Result<String, WebError> {
        let Some((provider, client)) = &self.backend else {
            return Err(WebError::SearchNotConfigured);
        };
        if input.query.trim().is_empty() {
            return Err(WebError::EmptyQuery);
        }
        let wanted = input
            .max_results
            .unwrap_or(DEFAULT_RESULTS)
            .clamp(1, MAX_RESULTS);
        let mut url =
            url::Url::parse(&provider.searxng_url).map_err(|source| WebError::SearchUrl {
                url: provider.searxng_url.clone(),
                source,
            })?;
        let path = format!("{}/search", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url.query_pairs_mut()
            .clear()
            .append_pair("format", "json")
            .append_pair("q", &input.query);
        let fetched = client
            .get(url.as_str(), &ctx.cancel)
            .await
            .map_err(|e| WebError::SearchProvider(Box::new(e)))?;
        let (body, _) =
            read_limited(client, fetched.response, client.max_bytes, &ctx.cancel).await?;
        let parsed: SearxResponse =
            serde_json::from_slice(&body).map_err(WebError::SearchAnswer)?;
        if parsed.results.is_empty() {
            return Ok(format!("No results for {:?}.", input.query));
        }
        let mut out = format!("Results for {:?}:\n", input.query);
        for (i, r) in parsed.results.iter().take(wanted).enumerate() {
            out.push_str(&format!("\n{}. {}\n   {}\n", i + 1, r.title.trim(), r.url));
            let snippet: String = r.content.trim().chars().take(SNIPPET_CHARS).collect();
            if !snippet.is_empty() {
                out.push_str(&format!("   {snippet}\n"));
            }
        }
        Ok(out)
    }
}

impl TypedTool for WebSearch {
    type Input = WebSearchInput;
    const NAME: &'static str = "WebSearch";
    const DESCRIPTION: &'static str = "Search the web and return result titles, URLs and snippets.";

    async fn run(&self, ctx: &ToolContext, input: WebSearchInput) -> ToolOutput {
        match self.search(ctx, input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(e.to_string()),
        }
    }
}
