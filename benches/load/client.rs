//! The load generator: raw HTTP/1.1 keep-alive over tokio `TcpStream`s on one current-thread
//! runtime. Each connection owns its buffers (request bytes, read buffer, ITL scratch), so a
//! request costs no allocation once the buffers have grown; the generator must stay cheaper than
//! the gateway it measures, on a core it shares with the sims.

use std::cell::{Cell, RefCell};
use std::io::{Error, ErrorKind, Result};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::args::Arrivals;
use crate::workload::Workload;

/// Everything observed; samples and counts only while `recording` (the measurement window).
#[derive(Default)]
pub struct Recorder {
    pub recording: Cell<bool>,
    pub done: Cell<u64>,
    pub errors: Cell<u64>,
    pub chunks: Cell<u64>,
    /// Streams that have delivered their first token and not ended yet.
    pub open_streams: Cell<u64>,
    pub ttft_us: RefCell<Vec<u32>>,
    pub itl_us: RefCell<Vec<u32>>,
    pub e2e_us: RefCell<Vec<u32>>,
    pub first_errors: RefCell<Vec<String>>,
    serial: Cell<u64>,
}

fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get() + n);
}

impl Recorder {
    /// A recorder whose serials start where no earlier run of this program's were (the clock's
    /// microseconds): a warm-up run in another process must not leave the measured run's serials
    /// and made-up words in the gateway's caches, which would measure something easier.
    pub fn new() -> Recorder {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Recorder {
            // The serial is written as 10 digits: stay clear of the wrap.
            serial: Cell::new(micros % 9_000_000_000),
            ..Recorder::default()
        }
    }

    pub fn error(&self, what: &str) {
        if self.recording.get() {
            bump(&self.errors, 1);
        }
        let mut first = self.first_errors.borrow_mut();
        if first.len() < 5 {
            first.push(what.chars().take(300).collect());
        }
    }
}

fn us(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').find_map(|line| {
        let (k, v) = line.split_at(line.iter().position(|&b| b == b':')?);
        k.eq_ignore_ascii_case(name).then(|| v[1..].trim_ascii())
    })
}

/// Does an SSE `data:` payload carry generated text? (Role-only and finish chunks do not.)
fn carries_tokens(data: &[u8]) -> bool {
    for key in [&b"\"content\":\""[..], b"\"text\":\""] {
        if let Some(i) = find(data, key) {
            if data.get(i + key.len()).is_some_and(|&b| b != b'"') {
                return true;
            }
        }
    }
    false
}

pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    req: Vec<u8>,
    sse: Vec<u8>,
    itl: Vec<u32>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            req: Vec::new(),
            sse: Vec::new(),
            itl: Vec::new(),
        })
    }

    async fn write_request(&mut self) -> Result<()> {
        let mut bytes = &self.req[..];
        while !bytes.is_empty() {
            self.stream.writable().await?;
            match self.stream.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads more bytes after `end`, compacting or growing the buffer (never zeroing it again).
    async fn fill(&mut self) -> Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.stream.try_read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.stream.readable().await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Index (absolute) of `needle` in the unread bytes, reading until it appears.
    async fn read_until(&mut self, needle: &[u8]) -> Result<usize> {
        let mut from = self.start;
        loop {
            if let Some(i) = find(&self.buf[from..self.end], needle) {
                return Ok(from + i);
            }
            let keep = self.end.saturating_sub(needle.len()).max(self.start) - self.start;
            self.fill().await?;
            from = self.start + keep;
        }
    }

    async fn need(&mut self, n: usize) -> Result<()> {
        while self.end - self.start < n {
            self.fill().await?;
        }
        Ok(())
    }
}

fn bad(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidData, what.into())
}

/// Sends request `serial` and reads its whole answer. `Ok(true)`: the connection can carry the
/// next request. Latencies count from `t0` (an open-loop arrival's scheduled time).
pub async fn run_one(
    c: &mut Conn,
    wl: &Workload,
    rec: &Recorder,
    stream: bool,
    t0: Instant,
) -> Result<bool> {
    let serial = rec.serial.get();
    rec.serial.set(serial + 1);
    wl.fill(serial, &mut c.req);
    c.write_request().await?;
    let head_end = c.read_until(b"\r\n\r\n").await? + 4;
    let head = &c.buf[c.start..head_end];
    let status: [u8; 3] = head
        .get(9..12)
        .and_then(|s| s.try_into().ok())
        .unwrap_or(*b"000");
    let chunked = header(head, b"transfer-encoding").is_some_and(|v| v == b"chunked");
    let length: Option<usize> =
        header(head, b"content-length").and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
    let keep_alive = header(head, b"connection").is_none_or(|v| v != b"close");
    c.start = head_end;
    c.sse.clear();
    c.itl.clear();
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    let (mut chunks, mut done_marker, mut error_event) = (0u64, false, false);
    if let Some(n) = length {
        c.need(n).await?;
        if &status != b"200" {
            let body = String::from_utf8_lossy(&c.buf[c.start..c.start + n]).into_owned();
            rec.error(&format!(
                "HTTP {}: {body}",
                String::from_utf8_lossy(&status)
            ));
        }
        c.start += n;
    } else if chunked {
        let mut counted_open = false;
        let result: Result<()> = async {
            loop {
                let line_end = c.read_until(b"\r\n").await?;
                let size_text = std::str::from_utf8(&c.buf[c.start..line_end])
                    .map_err(|_| bad("chunk size"))?;
                let size_text = size_text.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("chunk size"))?;
                c.start = line_end + 2;
                c.need(size + 2).await?;
                if size == 0 {
                    c.start += 2; // no trailers
                    return Ok(());
                }
                c.sse.extend_from_slice(&c.buf[c.start..c.start + size]);
                c.start += size + 2;
                if !stream {
                    continue;
                }
                // Complete SSE events (their JSON never holds a raw newline).
                let now = Instant::now();
                let mut at = 0;
                while let Some(i) = find(&c.sse[at..], b"\n\n") {
                    let event = &c.sse[at..at + i];
                    at += i + 2;
                    let Some(data) = event.strip_prefix(b"data: ") else {
                        continue;
                    };
                    if data == b"[DONE]" {
                        done_marker = true;
                    } else if data.starts_with(b"{\"error\"") {
                        error_event = true;
                    } else if carries_tokens(data) {
                        chunks += 1;
                        match last {
                            None => {
                                first = Some(now);
                                counted_open = true;
                                bump(&rec.open_streams, 1);
                            }
                            Some(prev) => c.itl.push(us(now - prev)),
                        }
                        last = Some(now);
                    }
                }
                c.sse.drain(..at);
            }
        }
        .await;
        if counted_open {
            rec.open_streams.set(rec.open_streams.get() - 1);
        }
        result?;
        if &status != b"200" {
            let body = String::from_utf8_lossy(&c.sse).into_owned();
            rec.error(&format!(
                "HTTP {}: {body}",
                String::from_utf8_lossy(&status)
            ));
        }
    } else {
        return Err(bad("response without content-length or chunked body"));
    }
    let end = Instant::now();
    if &status != b"200" {
        return Ok(keep_alive);
    }
    if stream && (!done_marker || error_event || chunks == 0) {
        rec.error("stream ended without [DONE], with an error event or without tokens");
        return Ok(keep_alive);
    }
    if rec.recording.get() {
        bump(&rec.done, 1);
        bump(&rec.chunks, chunks);
        rec.e2e_us.borrow_mut().push(us(end - t0));
        if let Some(f) = first {
            rec.ttft_us.borrow_mut().push(us(f - t0));
        }
        rec.itl_us.borrow_mut().extend_from_slice(&c.itl);
    }
    Ok(keep_alive)
}

/// One closed-loop client: requests back to back, each on a keep-alive connection to the worker
/// `turn` picks from `addrs` (one connection per worker, opened when first needed). A client that
/// keeps one worker gets `addrs` of one; clients doing a client-side round robin share `turn`.
pub async fn closed_loop(
    addrs: Vec<SocketAddr>,
    turn: Rc<Cell<usize>>,
    wl: Rc<Workload>,
    rec: Rc<Recorder>,
    stream: bool,
) {
    let mut conns: Vec<Option<Conn>> = addrs.iter().map(|_| None).collect();
    loop {
        let k = turn.get() % addrs.len();
        turn.set(k + 1);
        let addr = addrs[k];
        let mut conn = match conns[k].take() {
            Some(c) => c,
            None => match Conn::connect(addr).await {
                Ok(c) => c,
                Err(e) => {
                    rec.error(&format!("connect {addr}: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        match run_one(&mut conn, &wl, &rec, stream, Instant::now()).await {
            Ok(true) => conns[k] = Some(conn),
            Ok(false) => {}
            Err(e) => rec.error(&format!("{addr}: {e}")),
        }
    }
}

/// Open loop: arrivals at `rate`/s (Poisson or evenly paced), each on an idle pooled connection or a new one (at
/// most `max_conns`; an arrival finding none is an error, never a delay, so the schedule holds).
/// Latency counts from the scheduled arrival, so a slow server cannot hide queueing.
pub async fn open_loop(
    addrs: Vec<SocketAddr>,
    rate: f64,
    arrivals: Arrivals,
    max_conns: usize,
    wl: Rc<Workload>,
    rec: Rc<Recorder>,
    stream: bool,
) {
    let pool: Rc<RefCell<Vec<Conn>>> = Rc::default();
    let live = Rc::new(Cell::new(0usize));
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = Instant::now();
    for i in 0usize.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
        next += Duration::from_secs_f64(match arrivals {
            Arrivals::Poisson => -u.ln() / rate,
            Arrivals::Paced => 1.0 / rate,
        });
        tokio::time::sleep_until(next.into()).await;
        let idle = pool.borrow_mut().pop();
        if idle.is_none() {
            if live.get() >= max_conns {
                rec.error("open loop: every connection busy (raise --max-connections)");
                continue;
            }
            live.set(live.get() + 1);
        }
        let (addr, wl, rec, pool, live, t0) = (
            addrs[i % addrs.len()],
            Rc::clone(&wl),
            Rc::clone(&rec),
            Rc::clone(&pool),
            Rc::clone(&live),
            next,
        );
        tokio::task::spawn_local(async move {
            let conn = match idle {
                Some(c) => Ok(c),
                None => Conn::connect(addr).await,
            };
            let outcome = match conn {
                Ok(mut c) => match run_one(&mut c, &wl, &rec, stream, t0).await {
                    Ok(true) => {
                        pool.borrow_mut().push(c);
                        return;
                    }
                    Ok(false) => Ok(()),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                rec.error(&format!("{addr}: {e}"));
            }
            live.set(live.get() - 1);
        });
    }
}
