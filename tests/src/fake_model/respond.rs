//! Request handling: every request is recorded with its schema errors and
//! routed (Responses, Chat Completions or a 404); the JSON error answers.

use super::*;

pub(super) fn error_body(
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
    message: &str,
) -> Value {
    json!({"error": {"type": kind, "param": param, "code": code, "message": message}})
}

pub(super) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(super) fn bad_request(param: Option<&str>, code: Option<&str>, message: &str) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &error_body("invalid_request_error", param, code, message),
    )
}

/// Which API a request is for.
#[derive(Clone, Copy, PartialEq)]
enum Route {
    Responses,
    Chat,
    Other,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        match (method == Method::POST, path) {
            (true, "/v1/responses") => Route::Responses,
            (true, "/v1/chat/completions") => Route::Chat,
            _ => Route::Other,
        }
    }
}

/// The axum fallback: records the request, then answers it by route.
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let headers = header_pairs(&headers);
    let route = Route::of(&method, &path);
    let parsed: Result<Value, String> = if body.is_empty() && route == Route::Other {
        Ok(Value::Null)
    } else {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    };
    let lean = shared.lock().lean;
    let (body_value, schema_errors) = checked_body(&parsed, &body, route, lean);
    let mut state = shared.lock();
    if method == Method::GET
        && let Some(resp) = window::probe(&mut state, &path)
    {
        return resp;
    }
    if !lean {
        state.requests.push(RecordedRequest {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body: body_value,
            schema_errors: schema_errors.clone(),
            received: std::time::Instant::now(),
        });
    }
    match route {
        Route::Chat => chat::handle(&shared, state, parsed, &schema_errors),
        Route::Responses => responses(&shared, state, parsed, &schema_errors),
        Route::Other => json_response(
            StatusCode::NOT_FOUND,
            &error_body(
                "invalid_request_error",
                None,
                Some("unknown_url"),
                &format!("Unknown request URL: {method} {path}."),
            ),
        ),
    }
}

/// Header names lowercase, values lossily decoded, in the order received.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The body to record and what the schema of its route finds in it (in
/// lean mode neither).
fn checked_body(
    parsed: &Result<Value, String>,
    raw: &Bytes,
    route: Route,
    lean: bool,
) -> (Value, Vec<String>) {
    match parsed {
        Ok(_) if lean => (Value::Null, Vec::new()),
        Ok(v) if route == Route::Responses => (
            v.clone(),
            validate_create_response(v).err().unwrap_or_default(),
        ),
        Ok(v) if route == Route::Chat => (v.clone(), chat::validate(v)),
        Ok(v) => (v.clone(), Vec::new()),
        Err(e) => (
            Value::String(String::from_utf8_lossy(raw).into_owned()),
            vec![format!("invalid JSON: {e}")],
        ),
    }
}

/// `POST /v1/responses`: body and schema checks, a scripted HTTP error,
/// then the planned answer streamed from a task of its own.
fn responses(
    shared: &Arc<Shared>,
    mut state: MutexGuard<'_, FakeState>,
    parsed: Result<Value, String>,
    schema_errors: &[String],
) -> Response {
    let body = match parsed {
        Ok(body) => body,
        Err(e) => {
            return bad_request(
                None,
                None,
                &format!("We could not parse the JSON body of your request: {e}"),
            );
        }
    };
    if let Some(first) = schema_errors.first() {
        return bad_request(None, None, &format!("schema: {first}"));
    }
    // Scripted HTTP errors come before any semantic check.
    if let Some(resp) = pop_scripted_error(&mut state) {
        return resp;
    }
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return bad_request(
            Some("stream"),
            None,
            "The fake model only streams: send \"stream\": true.",
        );
    }
    let plan = match plan_response(&mut state, &body) {
        Ok(plan) => plan,
        Err(resp) => return *resp,
    };
    let (sse, resp) = open_sse(shared, state);
    tokio::spawn(async move {
        // Ok or Err(Closed): either way the stream is over.
        let _ = run_stream(sse, plan).await;
    });
    resp
}

/// The script's next reply when it is an `HttpError`, answered.
pub(super) fn pop_scripted_error(state: &mut FakeState) -> Option<Response> {
    if let Some(Reply::HttpError { .. }) = state.script.front()
        && let Some(Reply::HttpError {
            status,
            body,
            headers,
        }) = state.script.pop_front()
    {
        return Some(scripted_error(status, &body, &headers));
    }
    None
}

/// Counts an open stream and makes the SSE writer and the response it feeds.
pub(super) fn open_sse(
    shared: &Arc<Shared>,
    mut state: MutexGuard<'_, FakeState>,
) -> (Sse, Response) {
    let delay = state.event_delay;
    state.open_streams += 1;
    drop(state);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let sse = Sse {
        tx,
        seq: 0,
        delay,
        shared: Arc::clone(shared),
    };
    let mut resp = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (sse, resp)
}

pub(super) fn reject(param: Option<&str>, code: Option<&str>, message: &str) -> Box<Response> {
    Box::new(bad_request(param, code, message))
}

pub(super) fn scripted_error(status: u16, body: &Value, headers: &[(String, String)]) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(status, body);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    resp
}
