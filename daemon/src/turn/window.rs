//! Where a model's context window comes from — the user's configuration, what
//! the server says (asked once), an overflow error's numbers, else a default — and what was learned.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::provider::{Http, Settings};

/// The window assumed when nothing else says: the size of today's common
/// hosted models' windows, and small local servers teach theirs on overflow.
pub const DEFAULT_WINDOW: u64 = 128_000;

/// Automatic compaction starts past this share of the window.
pub const DEFAULT_AUTO_COMPACT_AT: f64 = 0.85;

/// A line warns once when the context passes this share of the threshold.
pub const WARN_SHARE: f64 = 0.8;

/// The user's choices about the window and compaction, as the client forwards them.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefs {
    /// `AGENTX_CONTEXT_WINDOW`: any model's window.
    pub window: Option<u64>,
    /// `[models.NAME] context_window`.
    pub model_windows: HashMap<String, u64>,
    pub auto_compact: bool,
    /// Share of the window (0..1) past which compaction is automatic.
    pub auto_compact_at: f64,
    /// `-m/--model` for this run.
    pub run_model: Option<String>,
    /// Project-instruction file names (AGENTS.md).
    pub instruction_files: Vec<String>,
}

impl Default for Prefs {
    fn default() -> Self {
        Self {
            window: None,
            model_windows: HashMap::new(),
            auto_compact: true,
            auto_compact_at: DEFAULT_AUTO_COMPACT_AT,
            run_model: None,
            instruction_files: Vec::new(),
        }
    }
}

impl Prefs {
    /// The window the user configured for `model`.
    fn configured(&self, model: &str) -> Option<u64> {
        self.window
            .or_else(|| self.model_windows.get(model).copied())
            .filter(|w| *w > 0)
    }

    /// The auto-compaction share, when automatic compaction is on.
    pub fn auto_share(&self) -> Option<f64> {
        self.auto_compact.then_some(self.auto_compact_at)
    }
}

/// Where a window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Config,
    Server,
    Overflow,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Server => "server",
            Self::Overflow => "overflow",
            Self::Default => "default",
        }
    }
}

/// A model's context window in tokens, and where that number came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    pub source: Source,
}

impl Window {
    /// Past this many tokens, compaction is automatic (`None`: off).
    pub fn threshold(&self, prefs: &Prefs) -> Option<u64> {
        prefs
            .auto_share()
            .map(|share| (self.tokens as f64 * share) as u64)
    }
}

/// One learned window.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Learned {
    tokens: u64,
    source: Source,
    at: i64,
}

/// What agentd learned of windows, per model server and model, kept in
/// `<profile>/model-windows.json` across restarts.
pub struct Models {
    path: Option<PathBuf>,
    learned: Mutex<HashMap<String, Learned>>,
    /// Servers asked this run (asked once each, answer or not).
    probed: Mutex<HashSet<String>>,
    /// What each server and model showed this run: the largest request it
    /// accepted and the smallest it rejected for size, in tokens.
    seen: Mutex<HashMap<String, Seen>>,
}

/// The request sizes a server accepted and rejected, bounds on its window.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    accepted: u64,
    rejected: Option<u64>,
    /// The largest request answered, as agentd estimates sizes (to compare
    /// with the next request's estimate).
    answered_estimate: Option<u64>,
}

/// A window a server could have: anything outside is a misreading (a
/// number from another field, a placeholder 0, a unit mix-up), never learned.
pub fn plausible(tokens: u64) -> bool {
    (MIN_WINDOW..=MAX_WINDOW).contains(&tokens)
}

fn key(base_url: &str, model: &str) -> String {
    format!("{base_url} {model}")
}

impl Models {
    /// The profile's learned windows (an unreadable file is set aside in the
    /// log and starts empty: these are only hints).
    pub fn open(path: PathBuf) -> Self {
        let learned = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "{} is not readable ({e}); windows are learned again",
                    path.display()
                );
                HashMap::new()
            }),
            Err(_) => HashMap::new(),
        };
        let mut learned: HashMap<String, Learned> = learned;
        // A file written before windows were bounded may hold absurd ones.
        learned.retain(|_, l| plausible(l.tokens));
        Self {
            path: Some(path),
            learned: Mutex::new(learned),
            probed: Mutex::new(HashSet::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Nothing learned and nothing kept (tests).
    #[cfg(test)]
    pub fn in_memory() -> Self {
        Self {
            path: None,
            learned: Mutex::new(HashMap::new()),
            probed: Mutex::new(HashSet::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The server answered a request of about `tokens`: its window is at least that.
    pub fn accepted(&self, base_url: &str, model: &str, tokens: u64) {
        let mut seen = self.seen();
        let s = seen.entry(key(base_url, model)).or_default();
        s.accepted = s.accepted.max(tokens);
    }

    /// The server answered a request agentd estimated at `tokens`.
    pub fn answered(&self, base_url: &str, model: &str, tokens: u64) {
        let mut seen = self.seen();
        let s = seen.entry(key(base_url, model)).or_default();
        s.answered_estimate = Some(s.answered_estimate.map_or(tokens, |a| a.max(tokens)));
    }

    /// Whether a request estimated at `tokens` is larger than any this
    /// server answered this run (`None`: none answered yet).
    pub fn larger_than_answered(&self, base_url: &str, model: &str, tokens: u64) -> Option<bool> {
        let seen = self.seen();
        let answered = seen.get(&key(base_url, model))?.answered_estimate?;
        Some(tokens > answered)
    }

    /// The server rejected a request of about `tokens` as too big, naming
    /// `named` as its window (or not): learns a window bounded by what the
    /// server showed — never above a size it rejected, never below one it
    /// accepted, never implausible. Whether a window was learned.
    pub fn rejected(&self, base_url: &str, model: &str, named: Option<u64>, tokens: u64) -> bool {
        let bounds = {
            let mut seen = self.seen();
            let s = seen.entry(key(base_url, model)).or_default();
            if tokens > 0 {
                s.rejected = Some(s.rejected.map_or(tokens, |r| r.min(tokens)));
            }
            *s
        };
        let Some(named) = named.filter(|n| plausible(*n)) else {
            return false;
        };
        let mut tokens = named;
        if let Some(rejected) = bounds.rejected
            && rejected > bounds.accepted
        {
            tokens = tokens.min(rejected);
        }
        tokens = tokens.max(bounds.accepted);
        if !plausible(tokens) {
            return false;
        }
        self.learn(base_url, model, tokens, Source::Overflow);
        true
    }

    fn learned(&self) -> std::sync::MutexGuard<'_, HashMap<String, Learned>> {
        self.learned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The window of `model` on `base_url`: configured, else learned (an
    /// overflow that proved a configured window too big wins), else known
    /// for the model's name, else [`DEFAULT_WINDOW`].
    pub fn window(&self, prefs: &Prefs, base_url: &str, model: &str) -> Window {
        let learned = self.learned().get(&key(base_url, model)).cloned();
        match (prefs.configured(model), learned) {
            (Some(c), Some(l)) if l.source == Source::Overflow && l.tokens < c => Window {
                tokens: l.tokens,
                source: Source::Overflow,
            },
            (Some(tokens), _) => Window {
                tokens,
                source: Source::Config,
            },
            (None, Some(l)) => Window {
                tokens: l.tokens,
                source: l.source,
            },
            (None, None) => Window {
                tokens: known(model).unwrap_or(DEFAULT_WINDOW),
                source: Source::Default,
            },
        }
    }

    /// Remembers a window a server stated or an overflow revealed.
    pub fn learn(&self, base_url: &str, model: &str, tokens: u64, source: Source) {
        if !plausible(tokens) {
            tracing::warn!(
                "not learning a context window of {tokens} tokens for {model} at {base_url}: \
                 not a plausible window"
            );
            return;
        }
        let at = agentx_shared::time::unix_ms(std::time::SystemTime::now());
        // Written under the lock: two learns serialised in one order and
        // written in the other would leave the file without the later one.
        let mut learned = self.learned();
        let k = key(base_url, model);
        if learned
            .get(&k)
            .is_some_and(|l| l.tokens == tokens && l.source == source)
        {
            return;
        }
        learned.insert(k, Learned { tokens, source, at });
        tracing::info!(
            "learned the context window of {model} at {base_url}: {tokens} tokens ({})",
            source.as_str()
        );
        if let (Some(path), Ok(bytes)) = (&self.path, serde_json::to_vec_pretty(&*learned))
            && let Err(e) = crate::durable::write_atomic(path, &bytes)
        {
            tracing::warn!("cannot keep the learned window in {}: {e}", path.display());
        }
    }

    /// Asks the server for the model's window, once per run per server and
    /// model: whether it said (and was learned).
    pub async fn probe_once(&self, http: &Http, settings: &Settings, prefs: &Prefs) -> bool {
        let k = key(&settings.base_url, &settings.model);
        if prefs.configured(&settings.model).is_some() {
            return false;
        }
        let first = self
            .probed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(k);
        if !first {
            return false;
        }
        match ask_server(http, settings).await {
            Some(tokens) => {
                self.learn(&settings.base_url, &settings.model, tokens, Source::Server);
                true
            }
            None => false,
        }
    }
}

/// Smaller "windows" are misreadings, not windows.
const MIN_WINDOW: u64 = 256;

/// Larger ones too: no model reads 100 million tokens at once.
const MAX_WINDOW: u64 = 100_000_000;

/// The window OpenAI publishes for a model name.
fn known(model: &str) -> Option<u64> {
    let name = model.rsplit('/').next().unwrap_or(model);
    tiktoken_rs::model::get_context_size(name).map(|n| n as u64)
}

/// How long a server gets to say its window.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the server says of its window, where it says it: llama.cpp's
/// `/props` and `/v1/models` meta, vLLM's `max_model_len`, LiteLLM's
/// `/model/info`, and the `context_length` fields of other gateways.
async fn ask_server(http: &Http, settings: &Settings) -> Option<u64> {
    let base = settings.base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    if let Some(models) = get_json(http, settings, &format!("{base}/models")).await
        && let Some(n) = window_in_models(&models, &settings.model)
    {
        return Some(n);
    }
    if let Some(props) = get_json(http, settings, &format!("{root}/props")).await
        && let Some(n) = window_in_props(&props)
    {
        return Some(n);
    }
    let info = get_json(http, settings, &format!("{root}/model/info")).await?;
    window_in_litellm(&info, &settings.model)
}

/// A small JSON document from `url` (at most 1 MiB read), or `None`.
async fn get_json(http: &Http, settings: &Settings, url: &str) -> Option<serde_json::Value> {
    let mut request = http.client.get(url).timeout(PROBE_TIMEOUT);
    if let Some(key) = &settings.api_key {
        request = request.bearer_auth(key);
    }
    let mut response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut body = Vec::new();
    let read = async {
        while let Some(chunk) = response.chunk().await.ok()? {
            body.extend_from_slice(&chunk);
            if body.len() > 1 << 20 {
                return None;
            }
        }
        Some(())
    };
    tokio::time::timeout(PROBE_TIMEOUT, read).await.ok()??;
    serde_json::from_slice(&body).ok()
}

fn number(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .filter(|n| plausible(*n))
}

/// The model's entry in an OpenAI-style `/models` list (the only entry
/// when none matches by id, as single-model servers name theirs freely).
fn window_in_models(list: &serde_json::Value, model: &str) -> Option<u64> {
    let data = list["data"].as_array()?;
    let entry = data
        .iter()
        .find(|m| m["id"].as_str() == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    [
        &entry["meta"]["n_ctx"],
        &entry["max_model_len"],
        &entry["context_length"],
        &entry["context_window"],
        &entry["max_context_length"],
        &entry["meta"]["n_ctx_train"],
    ]
    .into_iter()
    .find_map(number)
}

/// llama.cpp's `/props`.
fn window_in_props(props: &serde_json::Value) -> Option<u64> {
    number(&props["default_generation_settings"]["n_ctx"]).or_else(|| number(&props["n_ctx"]))
}

/// LiteLLM's `/model/info`.
fn window_in_litellm(info: &serde_json::Value, model: &str) -> Option<u64> {
    let data = info["data"].as_array()?;
    let entry = data
        .iter()
        .find(|m| m["model_name"].as_str() == Some(model))?;
    number(&entry["model_info"]["max_input_tokens"])
        .or_else(|| number(&entry["model_info"]["max_tokens"]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configuration_wins_unless_an_overflow_proved_it_too_big() {
        let models = Models::in_memory();
        let mut prefs = Prefs::default();
        let w = models.window(&prefs, "http://x/v1", "local");
        assert_eq!(
            w,
            Window {
                tokens: DEFAULT_WINDOW,
                source: Source::Default
            }
        );
        assert_eq!(
            models.window(&prefs, "http://x/v1", "gpt-4o").tokens,
            128_000
        );
        models.learn("http://x/v1", "local", 4096, Source::Server);
        assert_eq!(
            models.window(&prefs, "http://x/v1", "local").source,
            Source::Server
        );
        prefs.model_windows.insert("local".into(), 8192);
        assert_eq!(
            models.window(&prefs, "http://x/v1", "local"),
            Window {
                tokens: 8192,
                source: Source::Config
            }
        );
        models.learn("http://x/v1", "local", 2048, Source::Overflow);
        assert_eq!(
            models.window(&prefs, "http://x/v1", "local"),
            Window {
                tokens: 2048,
                source: Source::Overflow
            }
        );
        prefs.window = Some(1000);
        assert_eq!(models.window(&prefs, "http://x/v1", "local").tokens, 1000);
    }

    #[test]
    fn absurd_windows_are_never_learned_nor_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model-windows.json");
        let models = Models::open(path.clone());
        let prefs = Prefs::default();
        assert!(!models.rejected("http://x/v1", "m", Some(1_000_000_000_000), 5000));
        assert!(!models.rejected("http://x/v1", "m", Some(0), 5000));
        models.learn("http://x/v1", "m", 1_000_000_000_000, Source::Server);
        assert_eq!(
            models.window(&prefs, "http://x/v1", "m").source,
            Source::Default
        );
        assert!(!path.exists(), "an absurd window reached the file");
        // A file an older agentd wrote with one is not believed either.
        std::fs::write(
            &path,
            r#"{"http://x/v1 m":{"tokens":1000000000000,"source":"overflow","at":0}}"#,
        )
        .unwrap();
        let again = Models::open(path);
        assert_eq!(
            again.window(&prefs, "http://x/v1", "m").source,
            Source::Default
        );
    }

    #[test]
    fn a_learned_window_is_bounded_by_what_the_server_accepted_and_rejected() {
        let models = Models::in_memory();
        let prefs = Prefs::default();
        let at = |m: &Models| m.window(&prefs, "http://x/v1", "m").tokens;
        // Named above the request it rejected: the rejected size bounds it.
        assert!(models.rejected("http://x/v1", "m", Some(50_000), 3_000));
        assert_eq!(at(&models), 3_000);
        // Named below a request it answered: that request bounds it.
        models.accepted("http://x/v1", "m", 2_500);
        assert!(models.rejected("http://x/v1", "m", Some(1_000), 4_000));
        assert_eq!(at(&models), 2_500);
        // Within the bounds: as named.
        assert!(models.rejected("http://x/v1", "m", Some(2_800), 3_500));
        assert_eq!(at(&models), 2_800);
    }

    #[test]
    fn learned_windows_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model-windows.json");
        Models::open(path.clone()).learn("http://x/v1", "m", 4096, Source::Overflow);
        let again = Models::open(path);
        let w = again.window(&Prefs::default(), "http://x/v1", "m");
        assert_eq!(
            w,
            Window {
                tokens: 4096,
                source: Source::Overflow
            }
        );
    }

    #[test]
    fn concurrent_learns_all_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model-windows.json");
        let models = Models::open(path.clone());
        let threads = 6;
        for round in 0..20 {
            // Started together, the learns race to write the file: the one
            // written last must hold them all.
            let start = std::sync::Barrier::new(threads);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (models, start) = (&models, &start);
                    s.spawn(move || {
                        start.wait();
                        models.learn(
                            "http://x/v1",
                            &format!("m{round}-{t}"),
                            4096,
                            Source::Server,
                        );
                    });
                }
            });
            let again = Models::open(path.clone());
            let missing: Vec<String> = (0..threads)
                .map(|t| format!("m{round}-{t}"))
                .filter(|m| {
                    again.window(&Prefs::default(), "http://x/v1", m).source != Source::Server
                })
                .collect();
            assert!(
                missing.is_empty(),
                "round {round}: not in the file: {missing:?}"
            );
        }
    }

    #[test]
    fn servers_say_their_window_in_their_own_words() {
        let llama = json!({"object":"list","data":[{"id":"smollm2.gguf","meta":{"n_ctx_train":8192,"n_ctx":2048}}]});
        assert_eq!(window_in_models(&llama, "other-name"), Some(2048));
        let vllm =
            json!({"data":[{"id":"a","max_model_len":4096},{"id":"b","max_model_len":32768}]});
        assert_eq!(window_in_models(&vllm, "b"), Some(32768));
        assert_eq!(window_in_models(&vllm, "c"), None);
        let props = json!({"default_generation_settings":{"n_ctx":4096}});
        assert_eq!(window_in_props(&props), Some(4096));
        let litellm =
            json!({"data":[{"model_name":"m","model_info":{"max_input_tokens":"200000"}}]});
        assert_eq!(window_in_litellm(&litellm, "m"), Some(200_000));
        let silly = json!({"data":[{"id":"m","context_length":3}]});
        assert_eq!(window_in_models(&silly, "m"), None);
    }
}
