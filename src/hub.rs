//! Tokenizer files from the Hugging Face Hub: a repo id given as `--model-path` (that is not a
//! local folder) is fetched through `hf-hub` into the standard cache (`HF_HOME`, the layout the
//! Python `huggingface_hub` shares), then loaded from its snapshot folder like a local one.
//! `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` mean what they mean to `huggingface_hub`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_hub::api::tokio::{ApiBuilder, ApiError, ApiRepo};
use hf_hub::{Cache, Repo, RepoType};

use crate::net::error_chain;

/// The one file a tokenizer cannot do without.
const REQUIRED: &str = "tokenizer.json";
/// Read when the repo has them (`Tokenizer::from_dir`): special tokens and template, a newer
/// template file, extra end-of-sequence ids.
const OPTIONAL: [&str; 3] = [
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
];
/// A Hub that accepts the connection but never answers must not hold startup forever.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("Hub repository `{repo}` not found at {endpoint}, and `{repo}` is not a local folder either: check the repo id (a private repo also needs HF_TOKEN)")]
    RepoNotFound { repo: String, endpoint: String },
    #[error("Hub repository `{repo}` has no revision `{revision}` (--tokenizer-revision)")]
    RevisionNotFound { repo: String, revision: String },
    #[error("Hub repository `{repo}` (revision `{revision}`) has no {file}")]
    FileNotFound {
        repo: String,
        revision: String,
        file: &'static str,
    },
    /// A 404 without the Hub's error code (a mirror, say): which part is missing is unknown.
    #[error("not found at {endpoint}: Hub repository `{repo}`, its revision `{revision}` or its {file} (and `{repo}` is not a local folder either)")]
    NotFound {
        repo: String,
        revision: String,
        endpoint: String,
        file: &'static str,
    },
    #[error("Hub repository `{repo}` is gated and the Hub answered {status}: accept the model's terms on its Hub page, then set HF_TOKEN to a token of that account")]
    Gated { repo: String, status: u16 },
    #[error("Hub repository `{repo}` at {endpoint} answered {status}: it is private or gated (or does not exist); set HF_TOKEN to a token with access")]
    Denied {
        repo: String,
        endpoint: String,
        status: u16,
    },
    #[error("`{repo}` is not a local folder, and the Hub at {endpoint} cannot be reached for it: {reason} (with HF_HUB_OFFLINE=1 only the cache is used)")]
    Unreachable {
        repo: String,
        endpoint: String,
        reason: String,
    },
    #[error("Hub repository `{repo}` (revision `{revision}`) has no {REQUIRED} in the cache {cache}, and HF_HUB_OFFLINE is set: start once with network access to fill the cache")]
    NotCached {
        repo: String,
        revision: String,
        cache: String,
    },
    #[error("Hub repository `{repo}`: downloading {file} failed: {reason}")]
    Download {
        repo: String,
        file: &'static str,
        reason: String,
    },
}

/// A Hub repo id (`name` or `org/name`) as `--model-path` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoId(String);

impl RepoId {
    /// A path that exists is a local folder; otherwise a path shaped like a repo id is one.
    pub fn from_model_path(path: &Path) -> Option<RepoId> {
        if path.exists() {
            return None;
        }
        let s = path.to_str()?;
        let mut parts = s.split('/');
        let valid = |p: &str| {
            !p.is_empty()
                && !p.starts_with(['.', '-'])
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let shaped = match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, None) => valid(name),
            (Some(org), Some(name), None) => valid(org) && valid(name),
            _ => false,
        };
        shaped.then(|| RepoId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where `huggingface_hub` settings say to look.
struct Settings {
    endpoint: String,
    token: Option<String>,
    offline: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Settings {
            endpoint: var("HF_ENDPOINT")
                .map(|e| e.trim_end_matches('/').to_owned())
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned()),
            token: var("HF_TOKEN").map(|t| t.trim().to_owned()),
            // huggingface_hub's truthy values.
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            }),
        }
    }
}

/// The snapshot folder holding the repo's tokenizer files, downloaded first if need be.
pub async fn fetch(repo: &RepoId, revision: &str) -> Result<PathBuf, HubError> {
    let settings = Settings::from_env();
    let hf_repo = Repo::with_revision(repo.0.clone(), RepoType::Model, revision.to_owned());
    let cache = Cache::from_env();
    let cached = cache.repo(hf_repo.clone()).get(REQUIRED);
    if settings.offline {
        let path = cached.ok_or_else(|| HubError::NotCached {
            repo: repo.0.clone(),
            revision: revision.to_owned(),
            cache: cache.path().display().to_string(),
        })?;
        return snapshot_dir(&path, repo);
    }
    let mut builder = ApiBuilder::from_env()
        .with_progress(false)
        .with_endpoint(settings.endpoint.clone());
    // HF_TOKEN wins over the token file (`huggingface-cli login`), as in huggingface_hub.
    if settings.token.is_some() {
        builder = builder.with_token(settings.token.clone());
    }
    let api = builder.build().map_err(|e| HubError::Download {
        repo: repo.0.clone(),
        file: REQUIRED,
        reason: e.to_string(),
    })?;
    let refused = Refused {
        repo,
        revision,
        endpoint: &settings.endpoint,
        // What hf-hub sends: HF_TOKEN, else the token file.
        token: settings.token.clone().or_else(|| cache.token()),
        api_repo: api.repo(hf_repo),
    };
    let path = match get(&refused.api_repo, REQUIRED).await {
        Ok(path) => path,
        Err(e) => return Err(refused.error(REQUIRED, e).await),
    };
    for file in OPTIONAL {
        let Err(e) = get(&refused.api_repo, file).await else {
            continue;
        };
        match refused.error(file, e).await {
            // A file the repo does not have.
            HubError::FileNotFound { .. } | HubError::NotFound { .. } => {}
            // A cached repo still loads while the Hub is down, as in transformers.
            HubError::Unreachable { reason, .. } if cached.is_some() => {
                tracing::warn!(repo = %repo.0, file, %reason, "Hub unreachable: using the cached files");
            }
            e => return Err(e),
        }
    }
    snapshot_dir(&path, repo)
}

async fn get(api_repo: &ApiRepo, file: &str) -> Result<PathBuf, Failure> {
    match tokio::time::timeout(FILE_TIMEOUT, api_repo.get(file)).await {
        Ok(r) => r.map_err(Failure::Api),
        Err(_) => Err(Failure::Timeout),
    }
}

enum Failure {
    Api(ApiError),
    Timeout,
}

/// Turns a failed download into what the operator needs to know.
struct Refused<'a> {
    repo: &'a RepoId,
    revision: &'a str,
    endpoint: &'a str,
    token: Option<String>,
    api_repo: ApiRepo,
}

impl Refused<'_> {
    async fn error(&self, file: &'static str, failure: Failure) -> HubError {
        let repo = self.repo.0.clone();
        let unreachable = |reason: String| HubError::Unreachable {
            repo: repo.clone(),
            endpoint: self.endpoint.to_owned(),
            reason,
        };
        let e = match failure {
            Failure::Timeout => return unreachable(format!("no answer within {FILE_TIMEOUT:?}")),
            Failure::Api(ApiError::TooManyRetries(inner)) => *inner,
            Failure::Api(e) => e,
        };
        let status = match &e {
            ApiError::RequestError(req) if req.is_connect() || req.is_timeout() => {
                return unreachable(error_chain(req))
            }
            ApiError::RequestError(req) => req.status().map(|s| s.as_u16()),
            _ => None,
        };
        let Some(status @ (401 | 403 | 404)) = status else {
            return HubError::Download {
                repo,
                file,
                reason: error_chain(&e),
            };
        };
        let revision = self.revision.to_owned();
        let endpoint = self.endpoint.to_owned();
        match (self.error_code(file).await.as_deref(), status) {
            // The Hub answers 401 for a repo that does not exist when no token is sent.
            (Some("RepositoryNotFound"), _) => HubError::RepoNotFound { repo, endpoint },
            (Some("RevisionNotFound"), _) => HubError::RevisionNotFound { repo, revision },
            (Some("EntryNotFound"), _) => HubError::FileNotFound {
                repo,
                revision,
                file,
            },
            (Some("GatedRepo"), status) => HubError::Gated { repo, status },
            (_, 404) => HubError::NotFound {
                repo,
                revision,
                endpoint,
                file,
            },
            (_, status) => HubError::Denied {
                repo,
                endpoint,
                status,
            },
        }
    }

    /// The Hub names the cause of a 401, 403 or 404 in `X-Error-Code`; hf-hub drops the
    /// response, so it is asked once more (a HEAD, bounded).
    async fn error_code(&self, file: &str) -> Option<String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .ok()?;
        let mut head = client.head(self.api_repo.url(file));
        if let Some(token) = &self.token {
            head = head.bearer_auth(token);
        }
        let resp = head.send().await.ok()?;
        let code = resp.headers().get("x-error-code")?.to_str().ok()?;
        Some(code.to_owned())
    }
}

fn snapshot_dir(file: &Path, repo: &RepoId) -> Result<PathBuf, HubError> {
    file.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| HubError::Download {
            repo: repo.0.clone(),
            file: REQUIRED,
            reason: format!("unexpected cache path {}", file.display()),
        })
}

#[cfg(test)]
mod tests {
    use super::RepoId;
    use std::path::Path;

    #[test]
    fn repo_ids_and_local_paths() {
        for id in ["Qwen/Qwen2.5-7B-Instruct", "gpt2", "org/name.v1_2"] {
            assert_eq!(
                RepoId::from_model_path(Path::new(id)).map(|r| r.0),
                Some(id.to_owned())
            );
        }
        for not_id in [
            "/models/qwen",
            "./qwen",
            "../x/y",
            "a/b/c",
            "org/",
            "org/na me",
            "",
        ] {
            assert_eq!(RepoId::from_model_path(Path::new(not_id)), None, "{not_id}");
        }
        // A folder that exists is local even when it looks like a repo id.
        assert_eq!(RepoId::from_model_path(Path::new("src")), None);
    }
}
