//! `[[models]]` in the config file: several models behind one gateway, each with its names,
//! tokenizer, workers and routing. Any routing setting (`policy`, `prefix_page_size`, …) may be
//! given per model; what a model leaves out is the gateway-wide value.
//!
//! ```toml
//! [[models]]
//! name = "qwen2.5-7b"                 # what clients send as `model`
//! aliases = ["qwen"]                  # optional
//! tokenizer_path = "/models/qwen"     # or a Hub repo id
//! worker_urls = ["http://gpu-0:30000", "grpc://gpu-1:30001"]
//! policy = "prefix_cost"              # optional; every routing knob may be set per model
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};

use clap::ValueEnum;

use crate::routing::RoutingConfig;

/// One `[[models]]` entry.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// What clients send as `model`, and what answers carry.
    pub name: String,
    pub aliases: Vec<String>,
    /// A tokenizer folder or a Hub repo id; omitted: the bundled SmolLM2 tokenizer.
    pub tokenizer_path: Option<PathBuf>,
    pub tokenizer_revision: String,
    pub chat_template: Option<PathBuf>,
    pub context_length: Option<usize>,
    pub reasoning_parser: Option<crate::reasoning::ParserKind>,
    pub tool_call_parser: Option<crate::tool_calls::ParserKind>,
    pub worker_urls: Vec<String>,
    pub routing: RoutingConfig,
}

/// Keys of a `[[models]]` entry that are not routing settings.
const MODEL_KEYS: [&str; 10] = [
    "name",
    "aliases",
    "tokenizer_path",
    "model_path",
    "tokenizer_revision",
    "chat_template",
    "context_length",
    "reasoning_parser",
    "tool_call_parser",
    "worker_urls",
];

/// The routing settings' ids (`policy`, `prefix_page_size`, …): the keys a model may override.
pub fn routing_keys() -> Vec<String> {
    use clap::Args;
    RoutingConfig::augment_args(clap::Command::new("routing"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
}

/// What one entry gives, before its routing settings are parsed: the model's own fields, and
/// its routing keys (`_` spelling) with their values.
pub struct Entry {
    pub spec: ModelSpec,
    pub routing: Vec<(String, toml::Value)>,
}

/// Reads one `[[models]]` table; its routing settings are left for the caller to parse over the
/// gateway-wide ones (`ModelSpec::routing` is the default until then).
pub fn entry(table: &toml::Table, index: usize) -> Result<Entry, String> {
    // Keys as the flag names with `_` or `-`, as at the top level.
    let table: toml::Table = table
        .iter()
        .map(|(k, v)| (k.replace('-', "_"), v.clone()))
        .collect();
    let at = |key: &str| format!("models[{index}].{key}");
    let string = |key: &str| -> Result<Option<String>, String> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{}: expected a string", at(key))),
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, String> {
        match table.get(key) {
            None => Ok(Vec::new()),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    _ => Err(format!("{}: expected a list of strings", at(key))),
                })
                .collect(),
            Some(_) => Err(format!("{}: expected a list of strings", at(key))),
        }
    };
    let name = string("name")?
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| format!("{}: every model needs a name", at("name")))?;
    let routing_ids = routing_keys();
    let mut routing = Vec::new();
    for (key, value) in &table {
        if routing_ids.contains(key) {
            routing.push((key.clone(), value.clone()));
        } else if !MODEL_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "{}: unknown setting (a model takes {} and routing settings)",
                at(key),
                MODEL_KEYS.join(", ")
            ));
        }
    }
    let worker_urls = strings("worker_urls")?;
    for url in &worker_urls {
        crate::upstream::Origin::parse(url).map_err(|e| format!("{}: {e}", at("worker_urls")))?;
    }
    let context_length = match table.get("context_length") {
        None => None,
        Some(toml::Value::Integer(n)) if *n > 0 => usize::try_from(*n).ok(),
        Some(_) => {
            return Err(format!(
                "{}: expected a positive integer",
                at("context_length")
            ))
        }
    };
    let spec = ModelSpec {
        name,
        aliases: strings("aliases")?,
        tokenizer_path: string("tokenizer_path")?
            .or(string("model_path")?)
            .map(PathBuf::from),
        tokenizer_revision: string("tokenizer_revision")?.unwrap_or_else(|| "main".into()),
        chat_template: string("chat_template")?.map(PathBuf::from),
        context_length,
        reasoning_parser: string("reasoning_parser")?
            .map(|s| enum_value(&s, &at("reasoning_parser")))
            .transpose()?,
        tool_call_parser: string("tool_call_parser")?
            .map(|s| enum_value(&s, &at("tool_call_parser")))
            .transpose()?,
        worker_urls,
        routing: RoutingConfig::default(),
    };
    Ok(Entry { spec, routing })
}

/// `[[models]]`: each entry's own fields, and its routing settings parsed over the gateway-wide
/// ones (`args`, the whole command line with the file's values): the model's come last and win.
pub(super) fn specs(models: &toml::Value, args: &[OsString]) -> Result<Vec<ModelSpec>, String> {
    let toml::Value::Array(entries) = models else {
        return Err("`models` must be a list of tables ([[models]])".into());
    };
    let mut specs = Vec::with_capacity(entries.len());
    for (i, item) in entries.iter().enumerate() {
        let toml::Value::Table(table) = item else {
            return Err(format!("models[{i}] must be a table"));
        };
        let Entry { mut spec, routing } = entry(table, i)?;
        let mut own = args.to_vec();
        for (id, value) in &routing {
            let flag = format!("--{}", id.replace('_', "-"));
            super::push_value(&mut own, &flag, value)
                .map_err(|m| format!("models[{i}].{id}: {m}"))?;
        }
        let matches = super::ServeOnly::command()
            .args_override_self(true)
            .try_get_matches_from(own)
            .map_err(|e| format!("models[{i}]: {e}"))?;
        spec.routing = super::ServeOnly::from_arg_matches(&matches)
            .map_err(|e| format!("models[{i}]: {e}"))?
            .serve
            .routing;
        specs.push(spec);
    }
    Ok(specs)
}

fn enum_value<T: ValueEnum>(s: &str, at: &str) -> Result<T, String> {
    T::from_str(s, true).map_err(|e| format!("{at}: {e}"))
}

/// Names must pick one model each: no name or alias may be given twice.
pub fn check_names(models: &[ModelSpec]) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    for m in models {
        for name in std::iter::once(&m.name).chain(&m.aliases) {
            if seen.contains(&name.as_str()) {
                return Err(format!(
                    "[[models]]: the name `{name}` is given to more than one model"
                ));
            }
            seen.push(name);
        }
    }
    Ok(())
}

impl super::ServeConfig {
    /// With `[[models]]`, the one-model settings would be ambiguous: each model gives its own.
    pub(super) fn check_models(&self) -> Result<(), String> {
        let single = [
            ("worker_urls", !self.worker_urls.is_empty()),
            ("model_path", self.model_path.is_some()),
            ("served_model_name", self.served_model_name.is_some()),
            ("chat_template", self.chat_template.is_some()),
            ("context_length", self.context_length.is_some()),
            ("pd_disaggregation", self.pd.pd_disaggregation),
        ];
        if let Some((key, _)) = single.iter().find(|(_, set)| *set) {
            return Err(match *key {
                "pd_disaggregation" => {
                    "PD disaggregation serves one model: not with [[models]]".into()
                }
                _ => format!("`{key}` is a one-model setting: with [[models]], give it per model"),
            });
        }
        check_names(&self.models)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, ServeConfig};
    use crate::routing::PolicyKind;

    fn load(toml: &str, args: &[&str]) -> Result<ServeConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        let mut all = vec!["--config", path.to_str().unwrap()];
        all.extend_from_slice(args);
        ServeConfig::from_args(all)
    }

    const TWO: &str = r#"
policy = "cache_aware"
decode_weight = 64.0

[[models]]
name = "qwen2.5-7b"
aliases = ["qwen"]
tokenizer_path = "/models/qwen"
worker_urls = ["http://127.0.0.1:1", "grpc://127.0.0.1:2"]
policy = "prefix_cost"
prefix-page-size = 32

[[models]]
name = "smollm2"
worker_urls = ["http://127.0.0.1:3"]
"#;

    #[test]
    fn each_model_takes_its_own_routing_over_the_gateways() {
        let c = load(TWO, &["--prefill-weight", "2"]).unwrap();
        let [qwen, smol] = &c.models[..] else {
            panic!("two models: {:?}", c.models)
        };
        assert_eq!(qwen.name, "qwen2.5-7b");
        assert_eq!(qwen.aliases, ["qwen"]);
        assert_eq!(
            qwen.tokenizer_path.as_deref(),
            Some("/models/qwen".as_ref())
        );
        assert_eq!(qwen.worker_urls.len(), 2);
        assert_eq!(qwen.routing.policy, PolicyKind::PrefixCost);
        assert_eq!(qwen.routing.prefix_page_size, 32);
        // What a model leaves out is the gateway's: the file's and the command line's.
        assert_eq!(smol.routing.policy, PolicyKind::CacheAware);
        assert_eq!(smol.routing.prefix_page_size, 16);
        for m in [qwen, smol] {
            assert_eq!(m.routing.decode_weight, 64.0);
            assert_eq!(m.routing.prefill_weight, 2.0);
        }
        assert!(smol.tokenizer_path.is_none());
    }

    #[test]
    fn refuses_what_would_be_ambiguous() {
        let err = |toml: &str, args: &[&str]| load(toml, args).unwrap_err().to_string();
        let dup = format!("{TWO}\n[[models]]\nname = \"x\"\naliases = [\"qwen\"]\n");
        assert!(err(&dup, &[]).contains("`qwen` is given to more than one"));
        let unknown = "[[models]]\nname = \"m\"\ncolour = \"red\"\n";
        assert!(err(unknown, &[]).contains("models[0].colour"));
        let nameless = "[[models]]\nworker_urls = [\"http://127.0.0.1:1\"]\n";
        assert!(err(nameless, &[]).contains("needs a name"));
        let bad_url = "[[models]]\nname = \"m\"\nworker_urls = [\"ftp://x\"]\n";
        assert!(err(bad_url, &[]).contains("models[0].worker_urls"));
        let e = err(TWO, &["--worker-urls", "http://127.0.0.1:9"]);
        assert!(e.contains("`worker_urls` is a one-model setting"), "{e}");
        assert!(err(
            TWO,
            &["--pd-disaggregation", "--decode", "http://127.0.0.1:9"]
        )
        .contains("PD"));
    }
}
