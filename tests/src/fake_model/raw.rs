//! A raw server, for misbehaviour a well-formed HTTP stack cannot produce,
//! and the bytes of minimal well-formed answers to send through it.

use super::*;

/// A TCP server on `127.0.0.1` that hands each connection, once its request
/// head (and `Content-Length` body) is read, to a handler writing whatever
/// bytes it likes; stops accepting when dropped.
pub struct RawServer {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A handler of one connection: the stream and the request head.
pub type RawHandler = dyn Fn(&mut TcpStream, &str) + Send + Sync;

impl RawServer {
    pub fn start(handler: impl Fn(&mut TcpStream, &str) + Send + Sync + 'static) -> RawServer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("set_nonblocking");
        let addr = listener.local_addr().expect("local_addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<RawHandler> = Arc::new(handler);
        let (heads2, stop2) = (Arc::clone(&heads), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (heads, handler) = (Arc::clone(&heads2), Arc::clone(&handler));
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    let Some(head) = read_request(&mut stream) else {
                        return;
                    };
                    heads
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(head.clone());
                    handler(&mut stream, &head);
                });
            }
        });
        RawServer {
            addr,
            heads,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request heads received, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads a request head and its `Content-Length` body; the head.
pub(super) fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).ok()?;
    Some(head)
}

/// Holds a connection open without answering until the peer hangs up.
pub fn hold_silent(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// A complete, minimal Responses event stream answering `text`.
pub fn responses_sse(id: &str, text: &str) -> String {
    let events = [
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        json!({"type": "response.completed", "response": {"id": id, "status": "completed", "usage": usage()}}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// A `200 OK` head for a body of `len` bytes of `content_type`, with extra header lines.
pub fn ok_head(content_type: &str, len: usize, extra: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n{extra}Connection: close\r\n\r\n"
    )
}
