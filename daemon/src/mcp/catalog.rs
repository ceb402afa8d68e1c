//! Each server's tool list, cached in memory and on disk under the profile
//! by server configuration, so a turn does not start a server to list tools.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool a server offers, as the model is told of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
}

/// A server's tools under the configuration they were listed with.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    fingerprint: String,
    tools: Vec<ToolInfo>,
}

/// The tool lists of every server; writes go to `dir/<server>.json`.
pub struct Catalog {
    dir: PathBuf,
    memory: Mutex<HashMap<String, Entry>>,
}

impl Catalog {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The tools `server` listed under `fingerprint`, if known (memory,
    /// else disk).
    pub fn get(&self, server: &str, fingerprint: &str) -> Option<Vec<ToolInfo>> {
        if let Some(e) = self.lock().get(server)
            && e.fingerprint == fingerprint
        {
            return Some(e.tools.clone());
        }
        let text = std::fs::read(self.dir.join(format!("{server}.json"))).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        if entry.fingerprint != fingerprint {
            return None;
        }
        let tools = entry.tools.clone();
        self.lock().insert(server.to_owned(), entry);
        Some(tools)
    }

    /// Keeps `tools` as `server`'s list under `fingerprint`, in memory and on disk.
    pub fn put(&self, server: &str, fingerprint: &str, tools: Vec<ToolInfo>) {
        let entry = Entry {
            fingerprint: fingerprint.to_owned(),
            tools,
        };
        let bytes = serde_json::to_vec(&entry).unwrap_or_default();
        self.lock().insert(server.to_owned(), entry);
        if std::fs::create_dir_all(&self.dir).is_ok()
            && let Err(e) =
                crate::durable::write_atomic(&self.dir.join(format!("{server}.json")), &bytes)
        {
            tracing::warn!("could not keep the tool list of MCP server {server}: {e}");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The tools of an rmcp tool list, as kept.
pub fn from_rmcp(tools: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
    tools
        .into_iter()
        .map(|t| ToolInfo {
            name: t.name.into_owned(),
            description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
            input_schema: Value::Object((*t.input_schema).clone()),
        })
        .collect()
}
