//! The official `openai` Python package as the gateway's client: a script run with `python3`
//! that prints one JSON object of what it saw.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

/// The client script: `python3 - BASE_URL CHAT_MODEL EMBED_MODEL CUT_MODEL` (an empty name
/// skips that part). It prints what each call returned, and for the cut stream whether the
/// client raised; then every model listed, retrieved one by one, and a model not served.
pub(crate) const CLIENT: &str = r#"
import json, sys
import openai

base_url, chat_model, embed_model, cut_model = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key="sk-client-side-unused", max_retries=0, timeout=120)
messages = [{"role": "user", "content": "Say hello in one word."}]
tools = [{"type": "function", "function": {"name": "Read", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
out = {"openai_version": openai.__version__}

if chat_model:
    r = client.chat.completions.create(model=chat_model, messages=messages, max_tokens=32)
    out["chat"] = {"content": r.choices[0].message.content, "model": r.model,
                   "prompt_tokens": r.usage.prompt_tokens if r.usage else None}
    chunks = client.chat.completions.create(model=chat_model, messages=messages, max_tokens=32, stream=True)
    text, usage_chunks = "", 0
    for c in chunks:
        if c.usage is not None:
            usage_chunks += 1
        if c.choices and c.choices[0].delta.content:
            text += c.choices[0].delta.content
    out["stream"] = {"content": text, "usage_chunks": usage_chunks}
    chunks = client.chat.completions.create(model=chat_model, messages=messages, max_tokens=32, stream=True,
                                            stream_options={"include_usage": True})
    usage = None
    for c in chunks:
        if c.usage is not None:
            usage = c.usage.completion_tokens
    out["stream_usage"] = usage

if chat_model and sys.argv[5:] == ["tools"]:
    r = client.chat.completions.create(model=chat_model, messages=messages, tools=tools)
    call = r.choices[0].message.tool_calls[0]
    out["tool"] = {"name": call.function.name, "arguments": json.loads(call.function.arguments)}
    chunks = client.chat.completions.create(model=chat_model, messages=messages, tools=tools, stream=True)
    name, arguments = "", ""
    for c in chunks:
        if c.choices and c.choices[0].delta.tool_calls:
            for d in c.choices[0].delta.tool_calls:
                name += d.function.name or ""
                arguments += d.function.arguments or ""
    out["stream_tool"] = {"name": name, "arguments": json.loads(arguments)}

if embed_model:
    e = client.embeddings.create(model=embed_model, input=["one two", "three"])
    out["embeddings"] = {"count": len(e.data), "dims": len(e.data[0].embedding),
                         "prompt_tokens": e.usage.prompt_tokens}

if cut_model:
    try:
        for _ in client.chat.completions.create(model=cut_model, messages=messages, stream=True):
            pass
        out["cut"] = "completed without an error"
    except openai.APIError as err:
        out["cut"] = "APIError: " + str(err)

try:
    client.chat.completions.create(model="no-such-model", messages=messages)
    out["unknown"] = "answered"
except openai.NotFoundError as err:
    out["unknown"] = "NotFoundError: " + str(err)

listed = [m.id for m in client.models.list()]
out["models"] = {"listed": listed, "retrieved": [client.models.retrieve(m).id for m in listed]}
try:
    client.models.retrieve("no-such-model")
    out["unknown_model"] = "answered"
except openai.NotFoundError as err:
    out["unknown_model"] = "NotFoundError: " + str(err)

print(json.dumps(out))
"#;

/// Runs [`CLIENT`] against `base_url` and returns what it printed.
pub(crate) async fn run_client(base_url: &str, args: &[&str]) -> Value {
    let mut command = tokio::process::Command::new("python3");
    command
        .arg("-c")
        .arg(CLIENT)
        .arg(base_url)
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .kill_on_drop(true);
    let output = command.output().await.expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the openai client failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}
