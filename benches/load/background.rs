//! Background traffic that is not measured: clients on their own OS threads (so the measured
//! generator's runtime never waits on them) sending large chat prompts back to back, each
//! unique (random words, so neither the piece cache nor a whole-prompt cache can serve it).
//! It shows what a large prompt costs the *other* requests: compare the small requests'
//! latency with and without it, in one run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Default)]
pub struct Counts {
    pub sent: AtomicU64,
    /// Answers by status class: [2xx, 4xx, 5xx or none].
    pub by_class: [AtomicU64; 3],
}

pub struct BigPrompts {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub counts: Arc<Counts>,
    pub first_answer: Arc<Mutex<Option<String>>>,
}

impl BigPrompts {
    pub fn start(addr: SocketAddr, clients: usize, bytes: usize, model: &str) -> BigPrompts {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let first_answer = Arc::new(Mutex::new(None));
        let threads = (0..clients)
            .map(|i| {
                let (stop, counts, first) = (stop.clone(), counts.clone(), first_answer.clone());
                let model = model.to_owned();
                std::thread::spawn(move || {
                    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1);
                    while !stop.load(Ordering::Relaxed) {
                        let body = chat_body(&model, bytes, &mut seed);
                        counts.sent.fetch_add(1, Ordering::Relaxed);
                        let answer = send(addr, &body);
                        let class = match answer.as_deref().map(|a| a.get(9..10)) {
                            Ok(Some("2")) => 0,
                            Ok(Some("4")) => 1,
                            _ => 2,
                        };
                        counts.by_class[class].fetch_add(1, Ordering::Relaxed);
                        let mut first = first.lock().unwrap();
                        if first.is_none() {
                            *first = Some(match answer {
                                Ok(a) => a.chars().take(300).collect(),
                                Err(e) => e.to_string(),
                            });
                        }
                    }
                })
            })
            .collect();
        BigPrompts {
            stop,
            threads,
            counts,
            first_answer,
        }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A chat body with one user message of about `bytes` of random lowercase words.
fn chat_body(model: &str, bytes: usize, seed: &mut u64) -> Vec<u8> {
    let mut text = String::with_capacity(bytes + 16);
    while text.len() < bytes {
        // xorshift64: cheap, and every word differs.
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let len = 3 + (*seed % 6) as usize;
        for k in 0..len {
            text.push((b'a' + ((*seed >> (8 + 5 * k)) % 26) as u8) as char);
        }
        text.push(' ');
    }
    format!(
        r#"{{"model":"{model}","max_tokens":1,"messages":[{{"role":"user","content":"{text}"}}]}}"#
    )
    .into_bytes()
}

/// One request on a fresh connection; the answer's head and body as text.
fn send(addr: SocketAddr, body: &[u8]) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
