//! The module order in ARCHITECTURE.md is the law: a module of `src/` may use only modules below
//! it. This reads every `crate::…` path in `src/` and fails on an edge that points up.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The modules of the "Module order" block of ARCHITECTURE.md, bottom first.
fn documented_order() -> Vec<String> {
    let doc = std::fs::read_to_string(repo("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("## Module order")
        .nth(1)
        .expect("a `## Module order` section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```text block in the Module order section");
    block
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Top-level modules: `src/NAME.rs` or `src/NAME/`, without the crate roots.
fn top_modules() -> BTreeSet<String> {
    std::fs::read_dir(repo("src"))
        .expect("src/")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned).or(e
                .file_type()
                .ok()
                .filter(|t| t.is_dir())
                .map(|_| name))
        })
        .filter(|m| m != "lib" && m != "main")
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source text names through `crate::a` or `crate::{a, b::c}`.
fn crate_refs(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut refs = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Split the group at its top-level commas; each item starts with a module name.
            let mut depth = 0;
            let mut items = vec![String::new()];
            for c in group.chars() {
                match c {
                    '}' if depth == 0 => break,
                    ',' if depth == 0 => items.push(String::new()),
                    _ => {
                        depth += i32::from(c == '{') - i32::from(c == '}');
                        items.last_mut().expect("one item at least").push(c);
                    }
                }
            }
            refs.extend(items.iter().map(|i| leading_ident(i.trim_start())));
        } else {
            refs.insert(leading_ident(rest));
        }
    }
    refs.remove("");
    refs
}

fn leading_ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn modules_only_use_modules_below_them() {
    let order = documented_order();
    let rank = |m: &str| order.iter().position(|o| o == m);
    let modules = top_modules();
    let undocumented: Vec<_> = modules.iter().filter(|m| rank(m).is_none()).collect();
    assert!(
        undocumented.is_empty(),
        "modules missing from ARCHITECTURE.md's Module order: {undocumented:?}"
    );
    let mut upward = Vec::new();
    for module in &modules {
        let mut files = Vec::new();
        let file = repo(&format!("src/{module}.rs"));
        if file.exists() {
            files.push(file);
        }
        let dir = repo(&format!("src/{module}"));
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        for file in files {
            let source = std::fs::read_to_string(&file).expect("readable source");
            for used in crate_refs(&source) {
                if used != *module && modules.contains(&used) && rank(&used) > rank(module) {
                    upward.push(format!(
                        "{} uses {used}, which is above {module}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that point up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn reference_parser_sees_paths_and_groups() {
    let refs = crate_refs(
        "use crate::a::B;\nuse crate::{b, c::D, e::{F, G}};\n// crate::commented\nlet x = crate::h::f();",
    );
    let want: BTreeSet<String> = ["a", "b", "c", "e", "h"].map(String::from).into();
    assert_eq!(refs, want);
}
