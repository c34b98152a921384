//! The workers behind the gateway: identity, health and in-flight load.

pub mod breaker;
pub mod health;
pub mod load;
pub mod load_poll;
pub mod registry;
pub mod worker;

pub use load::LoadGuard;
pub use registry::{Registry, RegistryError};
pub use worker::{EngineLoad, Worker, WorkerId};

/// Worker URLs must be plain http(s) with a host: no other schemes, no paths that would
/// change where requests land.
pub fn validate_url(url: &str) -> Result<(), String> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|e| format!("invalid worker URL `{url}`: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        // Workers sit next to the gateway on a private network; no TLS client is built in.
        Some("https") => return Err(format!("worker URL `{url}`: https workers are not supported (no TLS client built in); use http://")),
        _ => return Err(format!("worker URL `{url}` must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("worker URL `{url}` has no host"));
    }
    if uri
        .path_and_query()
        .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
    {
        return Err(format!("worker URL `{url}` must not have a path or query"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn url_validation() {
        assert!(super::validate_url("http://127.0.0.1:30001").is_ok());
        assert!(super::validate_url("http://worker.local").is_ok());
        assert!(super::validate_url("https://worker.local")
            .unwrap_err()
            .contains("not supported"));
        for bad in [
            "ftp://x",
            "127.0.0.1:80",
            "http://",
            "http://h/v1",
            "javascript:alert(1)",
        ] {
            assert!(super::validate_url(bad).is_err(), "{bad}");
        }
    }
}
