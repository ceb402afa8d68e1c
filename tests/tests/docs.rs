//! The documentation agrees with the code: every `AGENTX_*` variable the
//! code reads and every config.toml key is in docs/config.md, every command
//! of `agentx` is named in the README or docs/, and nothing cites internal notes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The product's sources (not the tests' or benchmarks').
fn product_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for krate in ["shared/src", "daemon/src", "client/src"] {
        rust_files(&root().join(krate), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

fn docs_text() -> String {
    let mut text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut pages: Vec<_> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    for page in pages {
        text.push_str(&std::fs::read_to_string(page).unwrap());
    }
    text
}

/// `"AGENTX_NAME"` string literals: the variables the code reads.
fn variables_read(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find("\"AGENTX_") {
        let name: String = rest[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > "AGENTX_".len() && rest[at + 1 + name.len()..].starts_with('"') {
            found.insert(name);
        }
        rest = &rest[at + 1..];
    }
    found
}

/// The field names of every `#[serde(deny_unknown_fields)]` struct: the
/// keys config.toml accepts.
fn config_keys(source: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if !line.contains("deny_unknown_fields") {
            continue;
        }
        for line in lines.by_ref() {
            let line = line.trim();
            if line.starts_with('}') {
                break;
            }
            if line.starts_with("//") || line.starts_with('#') || line.contains("struct ") {
                continue;
            }
            let line = line.strip_prefix("pub ").unwrap_or(line);
            if let Some((name, _)) = line.split_once(':') {
                keys.insert(name.trim().to_owned());
            }
        }
    }
    keys
}

#[test]
fn every_variable_the_code_reads_is_in_the_configuration_page() {
    let page = std::fs::read_to_string(root().join("docs/config.md")).unwrap();
    let mut missing = Vec::new();
    for (path, text) in product_sources() {
        for name in variables_read(&text) {
            if !page.contains(&format!("`{name}`")) {
                missing.push(format!("{name} ({})", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/config.md does not name: {missing:?}"
    );
}

#[test]
fn every_config_key_is_in_the_configuration_page() {
    let page = std::fs::read_to_string(root().join("docs/config.md")).unwrap();
    let mut keys = BTreeSet::new();
    for (path, text) in product_sources() {
        if path.starts_with(root().join("shared/src")) {
            keys.extend(config_keys(&text));
        }
    }
    assert!(
        keys.contains("approval"),
        "the key scan found nothing: {keys:?}"
    );
    let missing: Vec<_> = keys
        .iter()
        .filter(|k| {
            ![format!("`{k}`"), format!("[{k}]"), format!("[{k}.")]
                .iter()
                .any(|form| page.contains(form))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/config.md does not name: {missing:?}"
    );
}

#[test]
fn every_command_of_agentx_is_documented() {
    let help = std::process::Command::new(agentx_tests::agentx_bin())
        .arg("--help")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let docs = docs_text();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap_or("")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 10, "no commands in: {help}");
    let missing: Vec<_> = commands
        .iter()
        .filter(|c| !docs.contains(&format!("agentx {c}")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the README or docs/: {missing:?}"
    );
}

#[test]
fn the_docs_cite_no_internal_notes() {
    let mut text = docs_text();
    text.push_str(&std::fs::read_to_string(root().join("CONTRIBUTING.md")).unwrap());
    for needle in ["DESIGN", "§", "issue 1", "issue 2", "issue 3", "issue 4"] {
        assert!(!text.contains(needle), "the docs cite {needle:?}");
    }
}

#[test]
fn the_scans_find_what_they_look_for() {
    assert_eq!(
        variables_read(r#"env.var("AGENTX_ONE") ; "AGENTX_TWO_2" "AGENTX_" x"#),
        BTreeSet::from(["AGENTX_ONE".to_owned(), "AGENTX_TWO_2".to_owned()])
    );
    let keys = config_keys(
        "#[serde(deny_unknown_fields)]\nstruct F {\n    /// doc\n    a: u8,\n    #[serde(default)]\n    pub b_c: Option<u8>,\n}\nstruct G { z: u8 }",
    );
    assert_eq!(keys, BTreeSet::from(["a".to_owned(), "b_c".to_owned()]));
}
