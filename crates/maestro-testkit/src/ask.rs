//! What the scripted server read of one chat request: a leaf that the server and the rendering
//! of its answers both use.

use serde_json::Value;

/// What a chat request asks for, as far as the answer depends on it.
pub(crate) struct Ask {
    pub stream: bool,
    pub include_usage: bool,
    pub has_stream_options: bool,
    pub has_tools: bool,
    pub model: Option<String>,
    /// The whole body, or `null` when it was not needed.
    pub body: Value,
}
