//! Request-body validation against the official OpenAI Responses OpenAPI
//! excerpt (`fixtures/openai-responses-openapi-excerpt.yaml`), JSON Schema 2020-12.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::Value;

/// The OpenAPI excerpt, embedded so tests do not depend on the working directory.
pub const OPENAPI_YAML: &str = include_str!("../fixtures/openai-responses-openapi-excerpt.yaml");

/// The request body schema of `POST /responses`.
pub const CREATE_RESPONSE: &str = "CreateResponse";
/// The schema of one event of the `text/event-stream` answer.
pub const RESPONSE_STREAM_EVENT: &str = "ResponseStreamEvent";
/// The schema of a response object (non-streaming answer, `response.completed`).
pub const RESPONSE: &str = "Response";

/// Validates a JSON request body for POST /responses against CreateResponse.
///
/// The YAML is parsed once; each schema asked for is compiled once (the root
/// of the document gets `"$ref": "#/components/schemas/NAME"`) and cached.
///
/// Reading the schema literally as JSON Schema (not as OpenAPI with its
/// `discriminator` hints) has consequences, pinned by the unit tests: a user
/// message whose `content` is a list of parts matches two `oneOf` branches and
/// is rejected; an assistant `output_text` part must carry `logprobs`; nothing
/// at the top level is required, not even `model`.
///
/// Each error names the instance path (JSON pointer, `""` for the root) and
/// the problem; for a failed `oneOf`/`anyOf` the closest branch's errors
/// follow after "closest:".
pub fn validate_create_response(body: &Value) -> Result<(), Vec<String>> {
    validate_against(CREATE_RESPONSE, body)
}

/// Validates `value` against `#/components/schemas/{schema}` of the excerpt.
///
/// Panics if the schema name does not exist in the excerpt.
pub fn validate_against(schema: &str, value: &Value) -> Result<(), Vec<String>> {
    let validator = validator(schema);
    let errors: Vec<String> = validator.iter_errors(value).map(|e| describe(&e)).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The whole OpenAPI document as JSON.
pub fn openapi_document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        serde_norway::from_str::<Value>(OPENAPI_YAML).expect("the OpenAPI excerpt is valid YAML")
    })
}

fn validator(schema: &str) -> Arc<Validator> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Validator>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    // A panic while compiling (unknown schema) must not poison the cache for
    // everyone else: recover the guard.
    let mut map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(v) = map.get(schema) {
        return Arc::clone(v);
    }
    let mut doc = openapi_document().clone();
    assert!(
        doc.pointer(&format!("/components/schemas/{schema}"))
            .is_some(),
        "no schema {schema:?} in the OpenAPI excerpt"
    );
    doc["$ref"] = Value::String(format!("#/components/schemas/{schema}"));
    let compiled = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .build(&doc)
        .unwrap_or_else(|e| panic!("compiling {schema}: {e}"));
    let compiled = Arc::new(compiled);
    map.insert(schema.to_owned(), Arc::clone(&compiled));
    compiled
}

/// `PATH: problem`, with the closest branch of a failed `oneOf`/`anyOf`.
fn describe(error: &ValidationError<'_>) -> String {
    let mut out = format!("{}: {}", path_of(error), error.masked_with("value"));
    let mut current = closest_branch(error);
    // Follow nested unions down a few levels to the real problem.
    for _ in 0..6 {
        let Some(branch) = current else { break };
        let parts: Vec<String> = branch
            .iter()
            .take(3)
            .map(|e| format!("{}: {}", path_of(e), e.masked_with("value")))
            .collect();
        let schema = branch
            .first()
            .and_then(|e| schema_name(e.schema_path().as_str()));
        out.push_str(" — closest");
        if let Some(name) = schema {
            out.push_str(&format!(" {name}"));
        }
        out.push_str(": ");
        out.push_str(&parts.join("; "));
        current = match branch.as_slice() {
            [only] => closest_branch(only),
            _ => None,
        };
    }
    out
}

fn path_of(error: &ValidationError<'_>) -> String {
    let p = error.instance_path().as_str().to_owned();
    if p.is_empty() { "/".to_owned() } else { p }
}

/// `/components/schemas/NAME/...` → `NAME` (the innermost named schema).
fn schema_name(path: &str) -> Option<String> {
    let (_, rest) = path.rsplit_once("/components/schemas/")?;
    Some(rest.split('/').next()?.to_owned())
}

/// For a failed union, the branch most likely meant: branches whose `type`
/// tag mismatched are skipped, then the one with the fewest errors wins.
fn closest_branch<'e>(error: &'e ValidationError<'_>) -> Option<&'e Vec<ValidationError<'static>>> {
    let context = match error.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            context
        }
        _ => return None,
    };
    let base = error.instance_path().as_str();
    let tag_mismatch = |e: &ValidationError<'_>| {
        let path = e.instance_path().as_str();
        match e.kind() {
            ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. } => {
                path == format!("{base}/type")
            }
            ValidationErrorKind::Required { property } => {
                path == base && property.as_str() == Some("type")
            }
            // The branch wants another JSON type altogether.
            ValidationErrorKind::Type { .. } => path == base,
            _ => false,
        }
    };
    context
        .iter()
        .filter(|branch| !branch.is_empty() && !branch.iter().any(tag_mismatch))
        .min_by_key(|branch| branch.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shell_tool() -> Value {
        json!({
            "type": "function",
            "name": "shell",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
                "additionalProperties": false
            },
            "strict": true
        })
    }

    #[track_caller]
    fn assert_invalid(body: Value, path: &str) -> Vec<String> {
        let errors = validate_create_response(&body).expect_err("must be rejected");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("{path}: ")) || e.contains(&format!(" {path}: "))),
            "no error at {path}: {errors:#?}"
        );
        errors
    }

    #[test]
    fn minimal_body_passes() {
        validate_create_response(&json!({"model":"m","input":"hi","stream":true,"store":true}))
            .unwrap();
    }

    #[test]
    fn full_turn_with_tool_round_trip_passes() {
        let body = json!({
            "model": "gpt-test",
            "instructions": "be brief",
            "previous_response_id": "resp_1",
            "stream": true,
            "store": true,
            "tools": [shell_tool()],
            "input": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "..."},
                {"role": "system", "content": "sys"},
                {"role": "developer", "content": "dev"},
                {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_2", "name": "shell",
                 "arguments": "{\"cmd\":\"ls\"}", "status": "completed"},
                {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
                {"type": "function_call_output", "call_id": "call_2", "output": "aborted"}
            ]
        });
        validate_create_response(&body).unwrap();
    }

    #[test]
    fn input_of_wrong_type_fails() {
        let errors = assert_invalid(json!({"model":"m","input":5}), "/input");
        assert!(errors[0].contains("oneOf"), "{errors:?}");
        assert_invalid(json!({"model":"m","input":{"role":"user"}}), "/input");
        assert_invalid(json!({"model":"m","input":"hi","stream":"yes"}), "/stream");
        assert_invalid(
            json!({"model":"m","input":"hi","max_output_tokens":3}),
            "/max_output_tokens",
        );
        assert_invalid(
            json!({"model":"m","input":"hi","previous_response_id":7}),
            "/previous_response_id",
        );
    }

    #[test]
    fn function_tool_without_strict_fails_and_names_it() {
        let mut tool = shell_tool();
        tool.as_object_mut().unwrap().remove("strict");
        let errors = assert_invalid(json!({"model":"m","input":"hi","tools":[tool]}), "/tools/0");
        assert!(
            errors[0].contains("FunctionTool")
                && errors[0].contains("\"strict\" is a required property"),
            "{errors:#?}"
        );
    }

    #[test]
    fn function_tool_without_parameters_fails() {
        let mut tool = shell_tool();
        tool.as_object_mut().unwrap().remove("parameters");
        assert_invalid(json!({"model":"m","input":"hi","tools":[tool]}), "/tools/0");
    }

    #[test]
    fn malformed_items_fail() {
        // Unknown role.
        assert_invalid(json!({"input":[{"role":"robot","content":"hi"}]}), "/input");
        // Arguments must be a JSON *string*.
        assert_invalid(
            json!({"input":[{"type":"function_call","call_id":"c","name":"shell","arguments":{}}]}),
            "/input",
        );
        // A function call without its type tag is nothing.
        assert_invalid(
            json!({"input":[{"call_id":"c","name":"shell","arguments":"{}"}]}),
            "/input",
        );
        // Output without output.
        assert_invalid(
            json!({"input":[{"type":"function_call_output","call_id":"c"}]}),
            "/input",
        );
        // Unknown item type.
        assert_invalid(
            json!({"input":[{"type":"telepathy","call_id":"c"}]}),
            "/input",
        );
    }

    #[test]
    fn error_strings_name_path_and_problem() {
        let errors =
            validate_create_response(&json!({"input":"hi","temperature":"hot"})).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("/temperature: "), "{errors:?}");
        assert!(errors[0].contains("anyOf"), "{errors:?}");
    }

    /// Schema quirks, pinned so a schema update that changes them is noticed.
    #[test]
    fn schema_quirks() {
        // Nothing is required at the top level, unknown fields are allowed.
        validate_create_response(&json!({})).unwrap();
        validate_create_response(&json!({"input":"hi","frobnicate":1})).unwrap();
        // `parameters` is required but may be null.
        let mut tool = shell_tool();
        tool["parameters"] = Value::Null;
        validate_create_response(&json!({"input":"hi","tools":[tool]})).unwrap();
        // A function_call_output needs no call_id according to the schema.
        validate_create_response(&json!({"input":[{"type":"function_call_output","output":"ok"}]}))
            .unwrap();
        // A user message with content parts matches EasyInputMessage *and*
        // Item/InputMessage: the literal `oneOf` rejects it, although the
        // real API accepts it (OpenAPI's discriminator would pick one branch).
        let errors = assert_invalid(
            json!({"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}),
            "/input/0",
        );
        assert!(errors[0].contains("more than one"), "{errors:?}");
        // An assistant output message echoed back must carry `logprobs` in
        // its output_text parts (OutputTextContent requires it).
        let out_msg = |part: Value| {
            json!({"input":[{"type":"message","id":"msg_1","role":"assistant","status":"completed",
                             "content":[part]}]})
        };
        assert_invalid(
            out_msg(json!({"type":"output_text","text":"x","annotations":[]})),
            "/input",
        );
        validate_create_response(&out_msg(
            json!({"type":"output_text","text":"x","annotations":[],"logprobs":[]}),
        ))
        .unwrap();
    }

    #[test]
    fn other_schemas_are_reachable() {
        validate_against(
            RESPONSE_STREAM_EVENT,
            &json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,
                    "content_index":0,"delta":"hi","sequence_number":3,"logprobs":[]}),
        )
        .unwrap();
        assert!(
            validate_against(RESPONSE_STREAM_EVENT, &json!({"type":"response.nonsense"})).is_err()
        );
    }
}
