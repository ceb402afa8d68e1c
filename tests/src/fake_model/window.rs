//! The token window the fake can enforce (characters / 4, like a real
//! tokenizer roughly does), each server's overflow error shape, and window probes.

use super::*;

/// Whose words an overflow is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverflowShape {
    /// `400 {"error":{"code":"context_length_exceeded", "message": "This model's maximum
    /// context length is N tokens…"}}`
    OpenAi,
    /// llama.cpp's server: `exceed_context_size_error` with `n_ctx`, no number in the text.
    LlamaCpp,
    /// vLLM: a top-level `{"object":"error", "message": "…maximum context length is N…"}`.
    Vllm,
    /// LiteLLM's proxy: `ContextWindowExceededError`.
    LiteLlm,
    /// Ollama: no window in the words.
    Ollama,
    /// llama-cpp-python's OpenAI-compatible server: `200 OK` with an event
    /// stream already started, then the stream simply ends (its log says
    /// "Requested tokens (N) exceed context window of W"); no probe answers.
    SilentEnd,
}

/// A window enforced on every model call.
#[derive(Debug, Clone, Copy)]
pub(super) struct TokenWindow {
    pub(super) tokens: u64,
    pub(super) shape: OverflowShape,
}

/// Characters of every text the model would read (instructions, messages,
/// call arguments and outputs), over 4.
pub(super) fn tokens_of<'a>(texts: impl IntoIterator<Item = &'a Value>) -> u64 {
    fn chars(v: &Value) -> u64 {
        match v {
            Value::String(s) => s.chars().count() as u64,
            Value::Array(parts) => parts.iter().map(chars).sum(),
            Value::Object(o) => {
                ["content", "text", "arguments", "output", "name"]
                    .iter()
                    .filter_map(|k| o.get(*k))
                    .map(chars)
                    .sum::<u64>()
                    + o.get("function").map_or(0, chars)
                    + o.get("tool_calls").map_or(0, chars)
            }
            _ => 0,
        }
    }
    texts.into_iter().map(chars).sum::<u64>().div_ceil(4)
}

/// The overflow answer in `shape`'s words.
pub(super) fn overflow(shape: OverflowShape, window: u64, used: u64) -> Response {
    let body = match shape {
        OverflowShape::SilentEnd => {
            eprintln!("fake model: Requested tokens ({used}) exceed context window of {window}");
            let mut resp = Response::new(Body::from(String::new()));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            return resp;
        }
        OverflowShape::OpenAi => json!({"error": {
            "message": format!("This model's maximum context length is {window} tokens. However, your messages resulted in {used} tokens. Please reduce the length of the messages."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        OverflowShape::LlamaCpp => json!({"error": {
            "code": 400, "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": used, "n_ctx": window}}),
        OverflowShape::Vllm => json!({"object": "error",
            "message": format!("This model's maximum context length is {window} tokens. However, you requested {used} tokens ({used} in the messages, 0 in the completion). Please reduce the length of the messages or completion."),
            "type": "BadRequestError", "param": null, "code": 400}),
        OverflowShape::LiteLlm => json!({"error": {
            "message": format!("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - This model's maximum context length is {window} tokens. However, your messages resulted in {used} tokens."),
            "type": null, "param": null, "code": "400"}}),
        OverflowShape::Ollama => json!({"error": {
            "message": "the input length exceeds the context length", "type": "api_error"}}),
    };
    json_response(StatusCode::BAD_REQUEST, &body)
}

/// `GET /v1/models`, `/props`, `/model/info`: the advertised window, if any.
pub(super) fn probe(state: &mut FakeState, path: &str) -> Option<Response> {
    if !matches!(path, "/v1/models" | "/props" | "/model/info") {
        return None;
    }
    state.probes.push(path.to_owned());
    let Some(n) = state
        .advertised_window
        .filter(|_| !state.props_only || path == "/props")
    else {
        return Some(json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "not found"}),
        ));
    };
    Some(match path {
        "/v1/models" => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "meta": {"n_ctx_train": n * 4, "n_ctx": n}}]}),
        ),
        "/props" => json_response(
            StatusCode::OK,
            &json!({"default_generation_settings": {"n_ctx": n}}),
        ),
        _ => json_response(StatusCode::NOT_FOUND, &json!({"error": "not found"})),
    })
}

/// The reply to a request without tools (a summary request) when no
/// script says otherwise: short, naming how much it read.
pub(super) fn summary_text(tokens: u64) -> String {
    format!(
        "## Done\nDONE: everything so far (a handoff summary of {tokens} tokens of conversation)."
    )
}
