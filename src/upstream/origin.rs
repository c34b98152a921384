//! Where a worker listens: its base URL, checked once and kept ready for building request URIs.
//! The wire client needs only this, so it stays below the worker registry. `grpc://host:port`
//! (SMG's convention) names a worker that speaks SGLang's gRPC service instead of HTTP;
//! `grpcs://host:port` the same over TLS.

use std::sync::Arc;

use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderValue, Uri};

use super::pool::Pool;

#[derive(Debug, Clone)]
pub struct Origin {
    /// Base URL without a trailing slash.
    pub url: String,
    /// Parsed once: the URI a connection is opened to shares it (a reference count, not a
    /// parse and a copy).
    authority: Authority,
    /// The `Host` header of every request to it, made once.
    host_header: HeaderValue,
    https: bool,
    grpc: bool,
    /// Idle HTTP/1 connections to this address (shared by clones).
    pool: Arc<Pool>,
}

impl Origin {
    /// Worker URLs must be http, https, grpc or grpcs with a host: no other schemes, no paths that
    /// would change where requests land.
    pub fn parse(url: &str) -> Result<Origin, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid worker URL `{url}`: {e}"))?;
        let (https, grpc) = match uri.scheme_str() {
            Some("http") => (false, false),
            Some("https") => (true, false),
            Some("grpc") => (false, true),
            Some("grpcs") => (true, true),
            _ => {
                return Err(format!(
                    "worker URL `{url}` must start with http://, https://, grpc:// or grpcs://"
                ))
            }
        };
        let authority = match uri.authority() {
            Some(a) if !a.host().is_empty() => a.clone(),
            _ => return Err(format!("worker URL `{url}` has no host")),
        };
        if uri
            .path_and_query()
            .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
        {
            return Err(format!("worker URL `{url}` must not have a path or query"));
        }
        let host_header = HeaderValue::from_str(authority.as_str())
            .map_err(|e| format!("worker URL `{url}`: {e}"))?;
        Ok(Origin {
            url: url.trim_end_matches('/').to_owned(),
            authority,
            host_header,
            https,
            grpc,
            pool: Arc::default(),
        })
    }

    /// The worker speaks SGLang's gRPC service (`grpc://`, `grpcs://`), not HTTP.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// The connection is TLS (`https://`, `grpcs://`).
    pub fn is_tls(&self) -> bool {
        self.https
    }

    /// `host:port`.
    pub fn authority(&self) -> &str {
        self.authority.as_str()
    }

    /// The host part of the address (what a decode worker is told to find a prefill worker at).
    pub fn host(&self) -> &str {
        let a = self.authority.as_str();
        match a.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => a.rsplit_once(':').map_or(a, |(host, _)| host),
        }
    }

    /// The `Host` header for requests to it.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }

    /// Its idle connections.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn uri(&self, path: &'static str) -> Result<Uri, axum::http::Error> {
        Uri::builder()
            .scheme(if self.https {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            })
            .authority(self.authority.clone())
            .path_and_query(PathAndQuery::from_static(path))
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::Origin;

    #[test]
    fn host_of_an_origin() {
        for (url, host) in [
            ("http://10.0.0.2:30000", "10.0.0.2"),
            ("https://prefill.local", "prefill.local"),
            ("http://[::1]:8000", "::1"),
        ] {
            assert_eq!(Origin::parse(url).unwrap().host(), host);
        }
    }

    #[test]
    fn url_validation() {
        assert!(Origin::parse("http://127.0.0.1:30001").is_ok());
        assert_eq!(
            Origin::parse("http://worker.local/").map(|o| o.url),
            Ok("http://worker.local".to_owned())
        );
        let tls = Origin::parse("https://worker.local:8443").unwrap();
        assert_eq!(
            tls.uri("/generate").unwrap().to_string(),
            "https://worker.local:8443/generate"
        );
        let grpc = Origin::parse("grpc://127.0.0.1:30001").unwrap();
        assert!(grpc.is_grpc() && !tls.is_grpc() && !grpc.is_tls());
        let grpcs = Origin::parse("grpcs://w:443").unwrap();
        assert!(grpcs.is_grpc() && grpcs.is_tls());
        assert_eq!(grpc.authority(), "127.0.0.1:30001");
        for bad in [
            "ftp://x",
            "grpc://h:1/v1",
            "127.0.0.1:80",
            "http://",
            "http://h/v1",
            "javascript:alert(1)",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }
}
