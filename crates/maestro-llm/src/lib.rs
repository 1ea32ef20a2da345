//! Talking to language models: the [`Provider`] trait, the OpenAI-compatible Chat Completions
//! client (Ollama, vLLM, llama.cpp server, OpenAI) with SSE streaming, retries, tool-call modes
//! and context-length detection, the Anthropic Messages API client and its translation to and
//! from Chat Completions ([`anthropic`]), and [`ModelClient`], either one as configured.
//!
//! This crate knows nothing of pieces.

pub mod anthropic;
mod client;
pub mod flight;
mod image;
mod openai;
mod types;

pub use client::{ModelClient, ProviderKind};
pub use image::{ImagePart, describe_images, estimated_image_tokens};
pub use openai::{
    ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_ANSWER_TOKENS,
    EMBEDDING_BATCH, OpenAiCompat, OpenAiConfig, RetryPolicy,
};
pub use types::{
    BoxFuture, ChatRequest, ChatResponse, LlmError, Message, Provider, ResponseSchema, StreamEvent,
    ToolMode,
};
