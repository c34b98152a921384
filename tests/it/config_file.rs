//! `config/switchboard.toml` documents every setting, with the built-in defaults as its values,
//! and is itself a valid configuration.

use switchboard::config::ServeConfig;

use crate::support;

#[test]
fn documented_config_file_parses_and_covers_every_flag() {
    let path = support::repo_path("config/switchboard.toml");
    let text = std::fs::read_to_string(&path).expect("config file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&out.stdout);
    // Flag definitions are the lines that start with `--` (or `-x, --`).
    let flags = help
        .lines()
        .filter_map(|l| l.trim_start().split(", ").last())
        .filter_map(|w| w.strip_prefix("--"));
    for flag in flags {
        let key = flag
            .trim_end_matches([',', '.'])
            .split(['=', ' ', '<'])
            .next()
            .unwrap_or("")
            .replace('-', "_");
        if key.is_empty() || ["help", "version", "config", "tokenizer_path"].contains(&key.as_str())
        {
            continue;
        }
        assert!(
            text.contains(&format!("{key} =")) || text.contains(&format!("# {key} =")),
            "config/switchboard.toml does not document `{key}`"
        );
    }
}

/// The file says "Values shown are the defaults": read, it gives exactly the settings of an
/// empty command line.
#[test]
fn documented_values_are_the_defaults() {
    let path = support::repo_path("config/switchboard.toml");
    let mut from_file = ServeConfig::from_args(["--config", &path]).expect("the file parses");
    from_file.config = None;
    let defaults = ServeConfig::from_args(Vec::<String>::new()).expect("defaults");
    // Every setting is in the Debug rendering; the lines that differ name the settings.
    let (file, default) = (format!("{from_file:#?}"), format!("{defaults:#?}"));
    let only_in = |a: &str, b: &str| -> Vec<String> {
        let b: Vec<&str> = b.lines().collect();
        a.lines()
            .filter(|l| !b.contains(l))
            .map(|l| l.trim().to_owned())
            .collect()
    };
    assert!(
        file == default,
        "config/switchboard.toml differs from the defaults: file {:?}, default {:?}",
        only_in(&file, &default),
        only_in(&default, &file)
    );
}

#[tokio::test]
async fn gateway_starts_from_the_documented_file() {
    let sim = support::sim(&[]).await;
    let path = support::repo_path("config/switchboard.toml");
    // The file's port is overridden on the command line; everything else comes from the file.
    let gw = support::gateway(&[&sim], &["--config", &path]).await;
    let v = support::get_json(&format!("{}/server_info", gw.url)).await;
    assert_eq!(v["policy"], "prefix_cost");
}
