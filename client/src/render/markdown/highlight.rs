//! Code blocks coloured by kind of token (keyword, string, comment…) with
//! syntect's bundled syntaxes, loaded on the first code block, never at start.

use std::sync::OnceLock;

use syntect::easy::ScopeRangeIterator;
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxSet};
use syntect::util::LinesWithEndings;

/// What a piece of code is, as far as colouring goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Comment,
    String,
    Constant,
    Keyword,
    Type,
    Function,
    Tag,
}

impl Kind {
    /// The web view's CSS class for it.
    pub fn class(self) -> &'static str {
        match self {
            Kind::Comment => "hl-comment",
            Kind::String => "hl-string",
            Kind::Constant => "hl-constant",
            Kind::Keyword => "hl-keyword",
            Kind::Type => "hl-type",
            Kind::Function => "hl-function",
            Kind::Tag => "hl-tag",
        }
    }

    /// The terminal's colour for it (SGR parameters, the 16-colour palette
    /// so that light and dark terminals both read it).
    pub fn sgr(self) -> &'static str {
        match self {
            Kind::Comment => "90",
            Kind::String => "32",
            Kind::Constant => "36",
            Kind::Keyword => "35",
            Kind::Type => "33",
            Kind::Function => "34",
            Kind::Tag => "31",
        }
    }
}

/// One line of code: its pieces, each with its kind (`None`: plain).
pub type Line = Vec<(Option<Kind>, String)>;

/// Code beyond these sizes is shown plain: highlighting stays quick.
const MAX_BYTES: usize = 256 * 1024;
const MAX_LINE_BYTES: usize = 4096;

struct Syntaxes {
    set: SyntaxSet,
    /// Scope prefixes and their kinds (`None`: plain), the more specific first.
    kinds: Vec<(Scope, Option<Kind>)>,
}

fn syntaxes() -> &'static Syntaxes {
    static SYNTAXES: OnceLock<Syntaxes> = OnceLock::new();
    SYNTAXES.get_or_init(|| {
        let kinds = [
            ("comment", Some(Kind::Comment)),
            ("string", Some(Kind::String)),
            ("constant", Some(Kind::Constant)),
            // Operators stay plain: `=` is not a keyword to the eye.
            ("keyword.operator", None),
            ("keyword", Some(Kind::Keyword)),
            ("storage.type", Some(Kind::Keyword)),
            ("storage.modifier", Some(Kind::Keyword)),
            ("storage", Some(Kind::Keyword)),
            ("entity.name.function", Some(Kind::Function)),
            ("support.function", Some(Kind::Function)),
            ("variable.function", Some(Kind::Function)),
            ("meta.function-call", Some(Kind::Function)),
            ("entity.name.type", Some(Kind::Type)),
            ("entity.name.class", Some(Kind::Type)),
            ("entity.name.struct", Some(Kind::Type)),
            ("entity.name.enum", Some(Kind::Type)),
            ("support.type", Some(Kind::Type)),
            ("support.class", Some(Kind::Type)),
            ("entity.name.tag", Some(Kind::Tag)),
            ("entity.other.attribute-name", Some(Kind::Tag)),
        ]
        .into_iter()
        .filter_map(|(name, kind)| Scope::new(name).ok().map(|s| (s, kind)))
        .collect();
        Syntaxes {
            set: SyntaxSet::load_defaults_newlines(),
            kinds,
        }
    })
}

/// Loads the syntaxes now (off the path of the first answer that needs them).
pub fn warm_up() {
    let _ = syntaxes();
}

/// Loads the syntaxes on a thread of their own, once per process.
pub fn warm_up_in_background() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("syntaxes".into())
            .spawn(warm_up);
    });
}

/// The kind of the innermost scope that is listed.
fn kind_of(stack: &ScopeStack, kinds: &[(Scope, Option<Kind>)]) -> Option<Kind> {
    stack
        .as_slice()
        .iter()
        .rev()
        .find_map(|scope| {
            kinds
                .iter()
                .find(|(prefix, _)| prefix.is_prefix_of(*scope))
                .map(|(_, kind)| *kind)
        })
        .flatten()
}

/// `code` split in lines (without their line breaks), coloured for
/// `language` (a fence's info word such as `rust` or `py`); all plain when
/// the language is not known, not named, or the code is too big.
pub fn lines(code: &str, language: &str) -> Vec<Line> {
    let plain = || {
        code.lines()
            .map(|l| vec![(None, l.to_owned())])
            .collect::<Vec<Line>>()
    };
    if language.is_empty()
        || code.len() > MAX_BYTES
        || code.lines().any(|l| l.len() > MAX_LINE_BYTES)
    {
        return plain();
    }
    let syntaxes = syntaxes();
    let Some(syntax) = syntaxes.set.find_syntax_by_token(language) else {
        return plain();
    };
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let mut out = Vec::new();
    for line in LinesWithEndings::from(code) {
        let Ok(ops) = state.parse_line(line, &syntaxes.set) else {
            return plain();
        };
        let mut pieces: Line = Vec::new();
        for (range, op) in ScopeRangeIterator::new(&ops, line) {
            if stack.apply(op).is_err() {
                return plain();
            }
            let text = line[range].trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            let kind = kind_of(&stack, &syntaxes.kinds);
            match pieces.last_mut() {
                Some((last, joined)) if *last == kind => joined.push_str(text),
                _ => pieces.push((kind, text.to_owned())),
            }
        }
        out.push(pieces);
    }
    out
}
