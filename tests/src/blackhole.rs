//! A TCP relay on loopback that can turn into a black hole: while it is,
//! bytes are read and dropped, new connections are held and never
//! answered — a link that loses packets without a reset.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Blackhole {
    pub port: u16,
    dropping: Arc<AtomicBool>,
    /// Every connection both ways, to be cut when the hole closes.
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Blackhole {
    /// Relays 127.0.0.1:`port` (a new port) to `target`.
    pub fn start(target: SocketAddr) -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dropping = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (d, o) = (Arc::clone(&dropping), Arc::clone(&open));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                o.lock().unwrap().push(client.try_clone().unwrap());
                if d.load(Ordering::SeqCst) {
                    // Held, never answered.
                    continue;
                }
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                o.lock().unwrap().push(server.try_clone().unwrap());
                relay(client.try_clone().unwrap(), server.try_clone().unwrap(), &d);
                relay(server, client, &d);
            }
        });
        Blackhole {
            port,
            dropping,
            open,
        }
    }

    /// From now on nothing gets through, in either direction.
    pub fn swallow(&self) {
        self.dropping.store(true, Ordering::SeqCst);
    }

    /// The link is back; connections that lost bytes are cut (as a peer's
    /// timeout would), new ones go through.
    pub fn heal(&self) {
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.dropping.store(false, Ordering::SeqCst);
    }
}

fn relay(mut from: TcpStream, mut to: TcpStream, dropping: &Arc<AtomicBool>) {
    let dropping = Arc::clone(dropping);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if dropping.load(Ordering::SeqCst) {
                        continue;
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.heal();
    }
}
