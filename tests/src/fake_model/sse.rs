//! The SSE writer: a scripted answer streamed as Responses events, chunked,
//! with the faults a test asks for (truncation, errors, stalls).

use super::*;

/// The client went away.
pub(super) struct Closed;

pub(super) struct Sse {
    pub(super) tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    pub(super) seq: u64,
    pub(super) delay: Duration,
    pub(super) shared: Arc<Shared>,
}

impl Drop for Sse {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.open_streams = state.open_streams.saturating_sub(1);
    }
}

impl Sse {
    /// Sends one event, numbering it (`sequence_number`) and naming it after its `type`.
    pub(super) async fn send(&mut self, mut event: Value) -> Result<(), Closed> {
        event["sequence_number"] = json!(self.seq);
        let name = event["type"].as_str().unwrap_or("message").to_owned();
        self.send_raw(&name, &event).await
    }

    /// A data-only SSE line (Chat Completions style).
    pub(super) async fn send_data(&mut self, data: &str) -> Result<(), Closed> {
        if self.seq > 0 && !self.delay.is_zero() {
            self.pause(self.delay).await?;
        }
        self.seq += 1;
        self.tx
            .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
            .await
            .map_err(|_| Closed)
    }

    pub(super) async fn send_raw(&mut self, name: &str, data: &Value) -> Result<(), Closed> {
        if self.seq > 0 && !self.delay.is_zero() {
            self.pause(self.delay).await?;
        }
        self.seq += 1;
        let chunk = format!("event: {name}\ndata: {data}\n\n");
        self.tx
            .send(Ok(Bytes::from(chunk)))
            .await
            .map_err(|_| Closed)
    }

    /// Sleeps, returning early with `Closed` when the client hangs up.
    pub(super) async fn pause(&self, d: Duration) -> Result<(), Closed> {
        tokio::select! {
            () = tokio::time::sleep(d) => Ok(()),
            () = self.tx.closed() => Err(Closed),
        }
    }
}

pub(super) fn chunks(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

pub(super) async fn run_stream(mut sse: Sse, plan: Plan) -> Result<(), Closed> {
    let Plan {
        meta,
        kind,
        incomplete,
        store,
        default_text,
    } = plan;
    let created = response_object(&meta, "in_progress", &[]);
    sse.send(json!({"type": "response.created", "response": created}))
        .await?;
    sse.send(json!({"type": "response.in_progress", "response": created}))
        .await?;
    let kind = match kind {
        PlanKind::Held(mut released, inner) => {
            tokio::select! {
                _ = released.wait_for(|r| *r) => {}
                () = sse.tx.closed() => return Err(Closed),
            }
            *inner
        }
        kind => kind,
    };
    let items = match kind {
        // Never nested: plan_response wraps a plan once.
        PlanKind::Held(..) => return Ok(()),
        PlanKind::Items(items) => items,
        PlanKind::Stall(d, items) => {
            sse.pause(d).await?;
            items
        }
        PlanKind::StreamError(v) => return sse.send_raw("error", &v).await,
        PlanKind::Truncated(item_id) => {
            let item = json!({"type": "message", "id": item_id, "role": "assistant",
                              "status": "in_progress", "content": []});
            sse.send(
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            )
            .await?;
            sse.send(json!({"type": "response.content_part.added", "item_id": item_id,
                            "output_index": 0, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
                .await?;
            for delta in chunks(&default_text, 3).into_iter().take(2) {
                sse.send(json!({"type": "response.output_text.delta", "item_id": item_id,
                                "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []}))
                    .await?;
            }
            return Ok(());
        }
    };
    for (index, item) in items.iter().enumerate() {
        send_item(&mut sse, index, item).await?;
    }
    if let Some(mut stored) = store {
        stored.output = items.clone();
        sse.shared.lock().responses.insert(meta.id.clone(), stored);
    }
    sse.shared.lock().completed += 1;
    if incomplete {
        let mut done = response_object(&meta, "incomplete", &items);
        done["usage"] = usage_of(&meta, &items);
        done["incomplete_details"] = json!({"reason": "max_output_tokens"});
        return sse
            .send(json!({"type": "response.incomplete", "response": done}))
            .await;
    }
    let done = response_object(&meta, "completed", &items);
    sse.send(json!({"type": "response.completed", "response": done}))
        .await
}

pub(super) async fn send_item(sse: &mut Sse, index: usize, item: &Value) -> Result<(), Closed> {
    let id = item["id"].as_str().unwrap_or_default().to_owned();
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    if item["type"] == "function_call" {
        let arguments = item["arguments"].as_str().unwrap_or_default();
        added["arguments"] = json!("");
        sse.send(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        )
        .await?;
        for delta in chunks(arguments, 2) {
            sse.send(
                json!({"type": "response.function_call_arguments.delta", "item_id": id,
                            "output_index": index, "delta": delta}),
            )
            .await?;
        }
        sse.send(
            json!({"type": "response.function_call_arguments.done", "item_id": id,
                        "output_index": index, "name": item["name"], "arguments": arguments}),
        )
        .await?;
    } else {
        let part = item["content"][0].clone();
        let text = part["text"].as_str().unwrap_or_default().to_owned();
        added["content"] = json!([]);
        sse.send(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        )
        .await?;
        let mut empty = part.clone();
        empty["text"] = json!("");
        sse.send(json!({"type": "response.content_part.added", "item_id": id,
                        "output_index": index, "content_index": 0, "part": empty}))
            .await?;
        for delta in chunks(&text, 3) {
            sse.send(json!({"type": "response.output_text.delta", "item_id": id,
                            "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}))
                .await?;
        }
        sse.send(json!({"type": "response.output_text.done", "item_id": id,
                        "output_index": index, "content_index": 0, "text": text, "logprobs": []}))
            .await?;
        sse.send(json!({"type": "response.content_part.done", "item_id": id,
                        "output_index": index, "content_index": 0, "part": part}))
            .await?;
    }
    sse.send(json!({"type": "response.output_item.done", "output_index": index, "item": item}))
        .await
}
