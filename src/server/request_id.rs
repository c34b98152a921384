//! The request id: the client's `x-request-id` when it is sane, else a fresh one. It becomes
//! the worker's `rid`, so it must be safe to log and to match by prefix.

use axum::http::HeaderMap;

const MAX_LEN: usize = 128;

pub fn from_headers(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= MAX_LEN
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map(str::to_owned)
        .unwrap_or_else(|| {
            // The thread-local generator: `new_v4` asks the kernel for every id (a syscall per request).
            uuid::Builder::from_random_bytes(rand::random())
                .into_uuid()
                .simple()
                .to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honours_sane_ids_only() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", "abc-123".parse().unwrap());
        assert_eq!(from_headers(&h), "abc-123");
        h.insert("x-request-id", "bad id\twith spaces".parse().unwrap());
        assert_eq!(from_headers(&h).len(), 32);
        assert_eq!(from_headers(&HeaderMap::new()).len(), 32);
    }
}
