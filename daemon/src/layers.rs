//! The allowed direction of dependencies between agentd's top-level modules, checked over
//! the source so that an import cycle (store → remote → turn → store) cannot come back.
//!
//! # Layers
//!
//! From the bottom; a module names only modules listed under it in [`ALLOWED`]:
//!
//! 1. Helpers that know no other module: `environment` (agentd's
//!    environment, read once at start), `durable` (atomic file writing),
//!    `shutdown` (the one stop handle), `cli`, `authority`, `peer`,
//!    `connections` (the HTTP/2 server, which keeps `peer`'s verdict per
//!    connection), `listener`, `pidlock`, `logging`, `spawner` (the thread that forks
//!    children that must not outlive agentd), `supervisor` (the process
//!    between agentd and a tool command or MCP server).
//! 2. `store` (conversations on disk) and `snapshot` (folder snapshots),
//!    independent of each other. The store announces its changes
//!    (`store::Changed`) to subscribers it is handed and knows none of them.
//! 3. `search` (the local index) over the store; `remote` (PostgreSQL) over
//!    the store and search's hit type; `mcp` (the MCP servers agentd runs)
//!    over the spawner.
//! 4. `turn`: the engine of one turn over the store and the MCP servers.
//!    It names the remote only for its URL redaction, never its state.
//! 5. `runner`: a turn from start to finish over `turn`, `remote` (the
//!    pre-turn pull) and `snapshot` (before and after).
//! 6. `services` (the gRPC edge: wire types converted there) and `server`
//!    (wiring: it makes the store, the subscribers, the shutdown handle).
//!
//! `benching`, `fuzzing` and `proptests` reach into the layers they test.

/// Each top-level module and what it may name with `crate::…` (a module,
/// or one item of it as `module::item`). A module not listed fails the check.
#[cfg(test)]
const ALLOWED: &[(&str, &[&str])] = &[
    ("environment", &[]),
    ("faults", &[]),
    ("authority", &[]),
    ("peer", &[]),
    ("connections", &["peer"]),
    ("cli", &[]),
    ("durable", &[]),
    ("listener", &[]),
    ("logging", &["cli", "environment"]),
    ("memory", &[]),
    ("pidlock", &[]),
    ("priority", &[]),
    ("shutdown", &[]),
    ("spawner", &[]),
    ("supervisor", &[]),
    ("store", &["durable", "environment", "priority"]),
    (
        "snapshot",
        &["durable", "environment", "priority", "memory"],
    ),
    ("search", &["store", "memory", "priority"]),
    ("mcp", &["spawner", "supervisor", "durable"]),
    (
        "remote",
        &["store", "durable", "environment", "search::Hit"],
    ),
    (
        "turn",
        &[
            "store",
            "durable",
            "environment",
            "shutdown",
            "spawner",
            "supervisor",
            "priority",
            "faults",
            "mcp",
            "remote::redact_userinfo",
        ],
    ),
    (
        "runner",
        &["turn", "remote", "snapshot", "store", "shutdown"],
    ),
    (
        "services",
        &[
            "runner",
            "turn",
            "remote",
            "search",
            "snapshot",
            "store",
            "environment",
            "shutdown",
            "peer",
            "memory",
            "priority",
            "mcp",
        ],
    ),
    (
        "server",
        &[
            "services",
            "runner",
            "turn",
            "remote",
            "search",
            "snapshot",
            "store",
            "environment",
            "shutdown",
            "authority",
            "connections",
            "listener",
            "peer",
            "pidlock",
            "mcp",
        ],
    ),
    ("benching", &["turn", "store", "search"]),
    (
        "fuzzing",
        &["snapshot", "search", "turn", "store", "authority"],
    ),
    ("proptests", &["snapshot", "turn", "store", "fuzzing"]),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::ALLOWED;

    /// The crate root's own files, not layered.
    const ROOT: &[&str] = &["lib", "main", "layers"];

    fn sources(path: &Path, out: &mut Vec<PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                sources(&entry.unwrap().path(), out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_owned());
        }
    }

    /// src/'s top-level modules and their files.
    fn modules() -> BTreeMap<String, Vec<PathBuf>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if !path.is_dir() && path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            sources(&path, modules.entry(stem.to_owned()).or_default());
        }
        for root in ROOT {
            modules.remove(*root);
        }
        modules
    }

    /// Every `crate::a::b…` path in `line`'s code (comments cut off), as
    /// its segments.
    fn crate_paths(line: &str) -> Vec<Vec<String>> {
        let code = line.split("//").next().unwrap_or_default();
        let mut paths = Vec::new();
        for (at, _) in code.match_indices("crate::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut rest = &code[at + "crate::".len()..];
            let mut path = Vec::new();
            loop {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                rest = &rest[name.len()..];
                path.push(name);
                match rest.strip_prefix("::") {
                    Some(next) => rest = next,
                    None => break,
                }
            }
            paths.push(path);
        }
        paths
    }

    /// Whether `path` (after `crate::`) is one `allowed` names.
    fn allowed(path: &[String], allowed: &[&str]) -> bool {
        allowed.iter().any(|a| {
            let want: Vec<&str> = a.split("::").collect();
            path.len() >= want.len() && want.iter().zip(path).all(|(w, p)| w == p)
        })
    }

    /// What `module`'s files name outside the module that `allowed` does
    /// not let them: "file:line: path".
    fn breaches(files: &[PathBuf], module: &str, permitted: &[&str]) -> Vec<String> {
        let mut broken = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                for path in crate_paths(line) {
                    let Some(first) = path.first() else {
                        broken.push(format!("{}:{}: crate::{{…}}", file.display(), n + 1));
                        continue;
                    };
                    if first != module && !allowed(&path, permitted) {
                        broken.push(format!(
                            "{}:{}: {module} names crate::{}",
                            file.display(),
                            n + 1,
                            path.join("::")
                        ));
                    }
                }
            }
        }
        broken
    }

    #[test]
    fn every_module_names_only_the_modules_below_it() {
        let table: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
        let mut broken = Vec::new();
        for (module, files) in modules() {
            match table.get(module.as_str()) {
                Some(permitted) => broken.extend(breaches(&files, &module, permitted)),
                None => broken.push(format!("src/{module} has no place in layers::ALLOWED")),
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn the_allowed_table_has_no_cycle() {
        // Each module may name only modules listed before it.
        let order: Vec<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
        for (at, (module, permitted)) in ALLOWED.iter().enumerate() {
            for name in *permitted {
                let target = name.split("::").next().unwrap_or_default();
                let below = order[..at].contains(&target);
                assert!(below, "{module} may name {target}, which is not below it");
            }
        }
    }

    #[test]
    fn the_check_sees_a_module_naming_one_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.rs");
        std::fs::write(
            &file,
            "use crate::durable;\n// crate::remote in a comment\nfn f() { crate::remote::pull::go(); }\n\
             use crate::{store, turn};\n",
        )
        .unwrap();
        let broken = breaches(&[file], "store", &["durable"]);
        assert_eq!(broken.len(), 2, "{broken:?}");
        assert!(broken[0].ends_with(":3: store names crate::remote::pull::go"));
        assert!(broken[1].ends_with(":4: crate::{…}"));
        let hits = breaches(
            &[dir.path().join("x.rs")],
            "turn",
            &["remote::redact_userinfo"],
        );
        assert!(
            hits.iter().any(|b| b.contains("crate::remote::pull")),
            "{hits:?}"
        );
    }
}
