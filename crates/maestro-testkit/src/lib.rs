//! Test support shared by Maestro's crates: a scripted OpenAI-compatible server speaking real
//! HTTP/SSE on 127.0.0.1, and temporary workspaces.
