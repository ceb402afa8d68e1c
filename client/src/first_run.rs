//! The first run without a key or a server: one short paragraph naming the
//! ways in, and an offer to use a local model server found on its usual port.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::error::{CliError, CliResult};

/// Local servers that speak the Chat Completions API, on their usual ports.
const KNOWN: [(&str, u16); 4] = [
    ("Ollama", 11434),
    ("llama.cpp's server", 8080),
    ("LM Studio", 1234),
    ("vLLM", 8000),
];

/// How long one port may take to answer `GET /v1/models`.
const PROBE_BOUND: Duration = Duration::from_millis(800);

/// A model server that answered on loopback.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub name: String,
    pub base_url: String,
    /// The first model it lists.
    pub model: Option<String>,
}

/// The ports to probe: `AGENTX_LOCAL_PORTS` (comma-separated) or the usual ones.
fn ports() -> Vec<(String, u16)> {
    let named = |port: u16| {
        KNOWN
            .iter()
            .find(|(_, p)| *p == port)
            .map_or_else(|| "a model server".to_owned(), |(n, _)| (*n).to_owned())
    };
    match std::env::var("AGENTX_LOCAL_PORTS") {
        Ok(list) => list
            .split(',')
            .filter_map(|p| p.trim().parse::<u16>().ok())
            .map(|p| (named(p), p))
            .collect(),
        Err(_) => KNOWN.iter().map(|(n, p)| ((*n).to_owned(), *p)).collect(),
    }
}

/// Every local server that lists its models, probed at once (each bounded).
pub fn find() -> Vec<Found> {
    let probes: Vec<_> = ports()
        .into_iter()
        .map(|(name, port)| std::thread::spawn(move || probe(&name, port)))
        .collect();
    probes
        .into_iter()
        .filter_map(|p| p.join().ok().flatten())
        .collect()
}

/// `GET /v1/models` on `127.0.0.1:port`: a server counts when it answers
/// 200 with a model list (a web server that happens to listen does not).
fn probe(name: &str, port: u16) -> Option<Found> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_BOUND).ok()?;
    stream.set_read_timeout(Some(PROBE_BOUND)).ok()?;
    stream.set_write_timeout(Some(PROBE_BOUND)).ok()?;
    // HTTP/1.0: the body ends with the connection, never chunked.
    let request = format!("GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = Vec::new();
    stream.take(1 << 20).read_to_end(&mut reply).ok()?;
    let text = String::from_utf8_lossy(&reply);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    if status.split_whitespace().nth(1) != Some("200") {
        return None;
    }
    let list: serde_json::Value = serde_json::from_str(body).ok()?;
    let models = list.get("data")?.as_array()?;
    Some(Found {
        name: name.to_owned(),
        base_url: format!("http://127.0.0.1:{port}/v1"),
        model: models
            .first()
            .and_then(|m| m.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_owned),
    })
}

/// The ways in, as one short paragraph; `found` names what runs here.
pub fn ways_in(found: &[Found]) -> String {
    let mut text = String::from(
        "no API key and no model server set. Set OPENAI_API_KEY (or AGENTX_API_KEY) for OpenAI, \
         or point AGENTX_BASE_URL (base_url in config.toml) at a local server with \
         AGENTX_PROVIDER=chat (Ollama, llama.cpp's server, LM Studio, vLLM)",
    );
    match found.first() {
        Some(f) => text.push_str(&format!(
            "; running here: {} at {}{}",
            f.name,
            f.base_url,
            f.model
                .as_ref()
                .map(|m| format!(" (model {m})"))
                .unwrap_or_default()
        )),
        None => text.push_str("; none of them answers on its usual port here"),
    }
    text
}

/// Names the ways in; at a terminal, offers the first local server found
/// and saves it in `config_file` when the user says yes. `Ok` only then.
pub fn offer(config_file: &Path) -> CliResult<()> {
    let found = find();
    let paragraph = ways_in(&found);
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let Some(first) = found.first().filter(|_| interactive) else {
        return Err(CliError::failed(paragraph));
    };
    eprintln!("agentx: {paragraph}.");
    eprint!(
        "Use {} at {} and save it in {}? [Y/n] ",
        first.name,
        first.base_url,
        config_file.display()
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::failed(format!("cannot read the answer: {e}")))?;
    if !matches!(answer.trim(), "" | "y" | "Y" | "yes") {
        return Err(CliError::failed(
            "no model server chosen: set OPENAI_API_KEY or AGENTX_BASE_URL",
        ));
    }
    save(config_file, first)?;
    eprintln!(
        "saved: base_url, provider and model in {}",
        config_file.display()
    );
    Ok(())
}

/// Sets `provider`, `base_url` and (when known) `model` in `config_file`,
/// keeping the rest of the file as it was; written whole, then renamed.
fn save(config_file: &Path, found: &Found) -> CliResult<()> {
    let text = match std::fs::read_to_string(config_file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(CliError::failed(format!(
                "cannot read {}: {e}",
                config_file.display()
            )));
        }
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| CliError::failed(format!("{} is not valid: {e}", config_file.display())))?;
    doc["provider"] = toml_edit::value("chat");
    doc["base_url"] = toml_edit::value(found.base_url.as_str());
    if let Some(model) = &found.model {
        doc["model"] = toml_edit::value(model.as_str());
    }
    let temp = config_file.with_extension("toml.tmp");
    let written =
        std::fs::write(&temp, doc.to_string()).and_then(|()| std::fs::rename(&temp, config_file));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        CliError::failed(format!("cannot write {}: {e}", config_file.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saving_keeps_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "# mine\napproval = \"auto\"\nmodel = \"old\"\n[shell_environment]\ninherit = \"core\"\n",
        )
        .unwrap();
        let found = Found {
            name: "Ollama".into(),
            base_url: "http://127.0.0.1:11434/v1".into(),
            model: Some("qwen3".into()),
        };
        save(&file, &found).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("# mine\n"), "{text}");
        let config = agentx_shared::config::Config::load_with(&file, |_| None).unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(config.model, "qwen3");
        assert_eq!(config.provider, agentx_shared::config::ProviderKind::Chat);
        assert_eq!(
            config.approval,
            Some(agentx_shared::config::ApprovalMode::Auto)
        );
    }

    #[test]
    fn the_paragraph_names_every_way_in_and_what_runs() {
        let none = ways_in(&[]);
        for way in ["OPENAI_API_KEY", "AGENTX_BASE_URL", "Ollama", "vLLM"] {
            assert!(none.contains(way), "{none}");
        }
        let found = ways_in(&[Found {
            name: "LM Studio".into(),
            base_url: "http://127.0.0.1:1234/v1".into(),
            model: None,
        }]);
        assert!(found.contains("running here: LM Studio at http://127.0.0.1:1234/v1"));
    }
}
