//! A tiny blocking HTTP/1.1 client for tests of the fake (and quick probes):
//! JSON POSTs, SSE parsing, and a connection held open mid-stream.

use super::*;

/// A complete HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    /// Lowercase names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The `event:` line (empty when absent).
    pub event: String,
    /// The `data:` lines parsed as JSON (a string when not JSON).
    pub data: Value,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    /// The body parsed as a `text/event-stream`.
    pub fn events(&self) -> Vec<SseEvent> {
        parse_sse(&self.body)
    }
}

/// Parses a `text/event-stream` body.
pub fn parse_sse(body: &str) -> Vec<SseEvent> {
    let body = body.replace("\r\n", "\n");
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = String::new();
            let mut data: Vec<&str> = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim_start().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if event.is_empty() && data.is_empty() {
                return None;
            }
            let data = data.join("\n");
            let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
            Some(SseEvent { event, data })
        })
        .collect()
}

/// `POST url` with a JSON body and `Authorization: Bearer test-key`.
pub fn post_json(url: &str, body: &Value) -> HttpReply {
    post_raw(url, body.to_string().as_bytes())
}

/// `POST url` with these bytes as an `application/json` body.
pub fn post_raw(url: &str, body: &[u8]) -> HttpReply {
    let (mut stream, host, path) = connect(url);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer test-key\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write request");
    stream.write_all(body).expect("write body");
    read_reply(BufReader::new(stream))
}

/// Sends a POST and returns the open connection once the response head has
/// been read, for tests that hang up mid-stream. The reader is positioned at
/// the start of the (chunked) body.
pub fn post_and_hold(url: &str, body: &Value) -> (u16, BufReader<TcpStream>) {
    let (mut stream, host, path) = connect(url);
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write request");
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    (status, reader)
}

pub(super) fn connect(url: &str) -> (TcpStream, String, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("only http:// URLs: {url}"));
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set_read_timeout");
    (stream, host.to_owned(), path.to_owned())
}

pub(super) fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("read status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    (status, headers)
}

pub(super) fn read_reply(mut reader: BufReader<TcpStream>) -> HttpReply {
    let (status, headers) = read_head(&mut reader);
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).expect("read chunk size") == 0 {
                break; // the peer closed without the last chunk
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .unwrap_or_else(|_| panic!("bad chunk size {line:?}"));
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("read chunk");
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        reader.read_exact(&mut body).expect("read body");
    } else {
        reader.read_to_end(&mut body).expect("read body");
    }
    HttpReply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}
