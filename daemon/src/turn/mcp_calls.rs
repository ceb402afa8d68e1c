//! MCP tools in a turn: offered to the model beside `shell`, and each call
//! approved, journaled and bounded as a shell command is.

use agentx_shared::conversation::{CallState, PendingCall};
use serde_json::{Value, json};

use agentx_shared::config::ApprovalMode;

use super::tools::Ran;
use super::{Event, Policy, Stop, Turn, head};
use crate::mcp::{CallError, Tool};

/// `body` with `tools` added to its tool list, in the provider's form.
pub(super) fn with_tools(mut body: Value, tools: &[Tool], chat: bool) -> Value {
    let Some(list) = body.get_mut("tools").and_then(Value::as_array_mut) else {
        return body;
    };
    for t in tools {
        let parameters = schema(&t.schema);
        list.push(if chat {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": parameters,
                }
            })
        } else {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": parameters,
                "strict": false,
            })
        });
    }
    body
}

/// A tool's input schema as the APIs take it: an object schema.
fn schema(input: &Value) -> Value {
    let mut schema = match input {
        Value::Object(_) => input.clone(),
        _ => json!({}),
    };
    if schema.get("type").is_none() {
        schema["type"] = json!("object");
    }
    if schema["type"] == json!("object") && schema.get("properties").is_none() {
        schema["properties"] = json!({});
    }
    schema
}

impl Turn<'_> {
    /// Lists the MCP tools this step offers (from the servers' cached
    /// lists); servers that could not be listed are told once per turn.
    pub(super) async fn refresh_mcp_tools(&mut self) {
        let Some(mcp) = self.engine.mcp.clone() else {
            return;
        };
        let (tools, notices) = mcp.tools(&self.spec.folder).await;
        self.mcp_tools = tools;
        if !self.mcp_told {
            self.mcp_told = true;
            for notice in notices {
                self.emit(Event::Notice(notice)).await;
            }
        }
    }

    /// Runs (or declines) one MCP tool call: approval names the server and
    /// the tool and shows the arguments; a cancel tells the server and ends
    /// the turn; `tool_timeout_sec` bounds the call.
    pub(super) async fn run_mcp_call(
        &mut self,
        pending: &mut [PendingCall],
        i: usize,
        was_running: bool,
    ) -> Result<Ran, Stop> {
        let call = pending[i].clone();
        // A name not in the cached lists: a server may have changed its list
        // while its notification's refresh has not landed (it races the
        // call's own answer); the running servers are asked again, once a
        // step.
        if let Some(mcp) = self.engine.mcp.clone()
            && !self.mcp_relisted
            && call.name.starts_with(crate::mcp::PREFIX)
            && !self.mcp_tools.iter().any(|t| t.name == call.name)
        {
            self.mcp_relisted = true;
            mcp.relist(&self.spec.folder).await;
            self.refresh_mcp_tools().await;
        }
        let (Some(mcp), Some(tool)) = (
            self.engine.mcp.clone(),
            self.mcp_tools.iter().find(|t| t.name == call.name).cloned(),
        ) else {
            let shown = head(&call.name, 100);
            return Ok(Ran::not_run(
                format!("unknown tool {:?}: no MCP server offers it now", call.name),
                format!("unknown tool {shown:?}"),
            ));
        };
        let arguments = match parse_arguments(&call.arguments) {
            Ok(a) => a,
            Err(e) => {
                return Ok(Ran::not_run(
                    format!("the arguments are not a JSON object: {e}"),
                    format!("arguments were not a JSON object ({e})"),
                ));
            }
        };
        let question = format!(
            "MCP server {}, tool {}, arguments {}",
            tool.server,
            tool.tool,
            head(&call.arguments, 2000)
        );
        // The server's or the tool's own setting, else the turn's policy.
        let policy = match tool.approval {
            Some(ApprovalMode::Ask) => Policy::Ask,
            Some(ApprovalMode::Auto) => Policy::Auto,
            Some(ApprovalMode::Never) => Policy::Never,
            None => self.spec.policy,
        };
        let approved = if was_running {
            self.approve_rerun(&call.call_id, &question).await?
        } else {
            self.approve_under(policy, &call.call_id, &question).await?
        };
        if !approved {
            return Ok(self.declined_under(policy, was_running));
        }
        pending[i].state = CallState::Running;
        self.update_call(pending, i).await?;
        let outcome = mcp
            .call(&tool, arguments, &self.spec.folder, self.io.cancel.clone())
            .await;
        // A first line for the status, as a shell command's output has;
        // 0 and 1 tell the client how it went.
        let at = format!("(MCP server {}, tool {})", tool.server, tool.tool);
        match outcome {
            Ok((output, failed)) => Ok(Ran {
                output: if failed {
                    format!("the tool reported an error {at}\n{}", output.text)
                } else {
                    format!("done {at}\n{}", output.text)
                },
                images: output.images,
                exit_code: Some(i32::from(failed)),
                denied: false,
                timed_out: false,
                not_run: None,
            }),
            Err(CallError::TimedOut(after)) => Ok(Ran {
                output: format!(
                    "timed out after {} s (tool_timeout_sec of MCP server {}); the server was \
                     told to cancel the call",
                    after.as_secs_f64(),
                    tool.server
                ),
                images: Vec::new(),
                exit_code: None,
                denied: false,
                timed_out: true,
                not_run: None,
            }),
            Err(CallError::Failed(e)) => Ok(Ran {
                output: format!("the call failed {at}\n{e}"),
                images: Vec::new(),
                exit_code: Some(1),
                denied: false,
                timed_out: false,
                not_run: None,
            }),
            Err(CallError::Cancelled) => {
                pending[i].state = CallState::Finished;
                pending[i].output = if self.client_gone() {
                    "cancelled: the agentx that ran the turn went away; the MCP server was told \
                     to cancel the call"
                } else {
                    "cancelled by the user; the MCP server was told to cancel the call"
                }
                .to_owned();
                self.update_call(pending, i).await?;
                Err(Stop::Cancelled)
            }
        }
    }
}

/// A call's arguments as a JSON object (empty text: no arguments).
fn parse_arguments(text: &str) -> Result<serde_json::Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("got {}", kind(&other))),
        Err(e) => Err(e.to_string()),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_join_the_list_in_each_providers_form() {
        let tool = Tool {
            name: "mcp__e__echo".into(),
            server: "e".into(),
            tool: "echo".into(),
            description: "Echoes".into(),
            schema: json!({"type": "object", "properties": {"message": {"type": "string"}}}),
            approval: None,
        };
        let body = with_tools(
            json!({"tools": [{"name": "shell"}]}),
            std::slice::from_ref(&tool),
            false,
        );
        assert_eq!(body["tools"][1]["name"], "mcp__e__echo");
        assert_eq!(body["tools"][1]["strict"], false);
        let body = with_tools(json!({"tools": []}), &[tool], true);
        assert_eq!(body["tools"][0]["function"]["name"], "mcp__e__echo");
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["properties"]["message"]["type"],
            "string"
        );
        assert_eq!(
            schema(&json!(null)),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert!(parse_arguments("").unwrap().is_empty());
        assert_eq!(parse_arguments(r#"{"a":1}"#).unwrap()["a"], 1);
        assert!(parse_arguments("[1]").unwrap_err().contains("an array"));
        assert!(parse_arguments("{").is_err());
    }
}
