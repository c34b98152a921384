//! A fake Hugging Face Hub on 127.0.0.1 speaking the file-resolve route hf-hub uses
//! (`GET /{org}/{name}/resolve/{revision}/{file}` with `Range`), answering as the Hub does: 206
//! with `ETag`, `X-Repo-Commit` and `Content-Range`; for an unknown repo 401 without a token and
//! 404 with one; 404 for an unknown revision or file; 401 (no token) or 403 (a token without
//! access) for a gated repo; each error with the Hub's `X-Error-Code`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The commit every repo here is at.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The token a gated repo accepts.
pub const GRANTED_TOKEN: &str = "hf_granted";

/// One repo: its files come from a folder; a gated one needs [`GRANTED_TOKEN`].
pub struct HubRepo {
    pub dir: PathBuf,
    pub gated: bool,
}

pub struct FakeHub {
    pub url: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHub {
    pub async fn start(repos: HashMap<String, HubRepo>) -> FakeHub {
        let app = axum::Router::new()
            .route(
                "/{org}/{name}/resolve/{revision}/{*file}",
                axum::routing::get(resolve),
            )
            .with_state(Arc::new(repos));
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        let app = app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                counted.fetch_add(1, Ordering::Relaxed);
                next.run(req)
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake hub");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeHub {
            url,
            requests,
            task,
        }
    }

    /// Requests it has answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Stops answering: the port is closed (as for a Hub out of reach).
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

async fn resolve(
    State(repos): State<Arc<HashMap<String, HubRepo>>>,
    Path((org, name, revision, file)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let not_found = |code: &'static str| {
        (StatusCode::NOT_FOUND, [("x-error-code", code)], code).into_response()
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(repo) = repos.get(&format!("{org}/{name}")) else {
        // Without a token the Hub does not say whether a private repo exists.
        return match auth {
            None => (
                StatusCode::UNAUTHORIZED,
                [("x-error-code", "RepositoryNotFound")],
            )
                .into_response(),
            Some(_) => not_found("RepositoryNotFound"),
        };
    };
    if repo.gated {
        match auth {
            None => {
                return (StatusCode::UNAUTHORIZED, [("x-error-code", "GatedRepo")]).into_response()
            }
            Some(a) if a != format!("Bearer {GRANTED_TOKEN}") => {
                return (StatusCode::FORBIDDEN, [("x-error-code", "GatedRepo")]).into_response()
            }
            Some(_) => {}
        }
    }
    if revision != "main" && revision != COMMIT {
        return not_found("RevisionNotFound");
    }
    let Ok(body) = std::fs::read(repo.dir.join(&file)) else {
        return not_found("EntryNotFound");
    };
    let len = body.len();
    // `bytes=a-b`, the only form hf-hub sends; b may run past the end.
    let (start, end) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
        .map(|(a, b)| (a, b.min(len.saturating_sub(1))))
        .unwrap_or((0, len.saturating_sub(1)));
    let etag = format!("\"{:016x}\"", fnv1a(&body));
    let mut resp = (StatusCode::PARTIAL_CONTENT, body[start..=end].to_vec()).into_response();
    let h = resp.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_str(&etag).expect("etag"));
    h.insert("x-repo-commit", HeaderValue::from_static(COMMIT));
    h.insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&format!("bytes {start}-{end}/{len}")).expect("range"),
    );
    resp
}

/// A content hash for the ETag (the Hub uses the blob's git or sha256 hash; any stable one does).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}
