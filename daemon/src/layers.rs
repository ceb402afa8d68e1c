//! The allowed direction of dependencies between agentd's top-level modules, checked
//! over the source so that an import cycle (store → remote → turn → store) cannot come back.
//!
//! From the bottom: `store` (conversations on disk) and `snapshot` know no
//! module above them; `search` and `remote` sit above the store, which
//! announces its commits to them (`store::Commits`) without knowing them;
//! `turn` runs turns and calls the remote's one pre-turn pull; `services`
//! and `server` are the gRPC edge over all of them.

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// (module, modules it must not name).
    const FORBIDDEN: &[(&str, &[&str])] = &[
        (
            "store",
            &["remote", "search", "turn", "snapshot", "services", "server"],
        ),
        (
            "snapshot",
            &["remote", "search", "turn", "services", "server"],
        ),
        (
            "search",
            &["remote", "turn", "snapshot", "services", "server"],
        ),
        ("remote", &["turn", "snapshot", "services", "server"]),
        ("turn", &["services", "server"]),
    ];

    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.display().to_string(), text));
            }
        }
    }

    #[test]
    fn no_module_names_one_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut broken = Vec::new();
        for (module, forbidden) in FORBIDDEN {
            let mut files = Vec::new();
            sources(&src.join(module), &mut files);
            assert!(!files.is_empty(), "no sources under src/{module}");
            for (path, text) in &files {
                for above in *forbidden {
                    let named = format!("crate::{above}::");
                    let used = format!("use crate::{above}");
                    for (n, line) in text.lines().enumerate() {
                        let code = line.split("//").next().unwrap_or_default();
                        if code.contains(&named) || code.contains(&used) {
                            broken.push(format!("{path}:{}: {module} names {above}", n + 1));
                        }
                    }
                }
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }
}
