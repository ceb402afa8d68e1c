//! Answering a query: the text taken literally (all words required, `"quoted
//! phrases"` kept; no other query syntax), scoped to a folder+agent or not,
//! ranked, and each hit given its snippet and highlights.

use tantivy::TantivyDocument;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser};
use tantivy::schema::Value as _;
use tantivy::snippet::SnippetGenerator;

use super::{SearchError, SearchIndex};

/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 160;

/// One search result.
#[derive(Debug, Clone)]
pub struct Hit {
    pub session_id: String,
    pub folder: String,
    pub agent: String,
    pub title: String,
    /// 0: the title matched.
    pub turn: u32,
    pub at: i64,
    pub snippet: String,
    pub highlights: Vec<(usize, usize)>,
    pub score: f32,
}

impl SearchIndex {
    /// The best `limit` hits for `text`, in `scope` (folder, agent) or
    /// everywhere. When reading the index fails (or panics) a rebuild is
    /// asked for and the error says so.
    pub fn search(
        &self,
        text: &str,
        scope: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let live = self.live();
        super::health::guarded(|| self.search_in(&live, text, scope, limit))
            .map_err(|e| self.failed(e))
    }

    fn search_in(
        &self,
        live: &super::health::Live,
        text: &str,
        scope: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let f = self.f;
        if text.trim().is_empty() {
            return Err(SearchError::Query("search needs some text".into()));
        }
        let literal = literal(text);
        if literal.is_empty() {
            // Only punctuation: no word to find.
            return Ok(Vec::new());
        }
        let mut parser = QueryParser::for_index(&live.index, vec![f.body, f.title]);
        parser.set_conjunction_by_default();
        let (query, _) = parser.parse_query_lenient(&literal);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, query.box_clone())];
        if let Some((folder, agent)) = scope {
            clauses.push((Occur::Must, Box::new(self.term_query(f.folder, folder))));
            clauses.push((Occur::Must, Box::new(self.term_query(f.agent, agent))));
        }
        let searcher = live.reader.searcher();
        let top = searcher.search(
            &BooleanQuery::new(clauses),
            &TopDocs::with_limit(limit.max(1)).order_by_score(),
        )?;
        let mut body = SnippetGenerator::create(&searcher, &*query, f.body)?;
        body.set_max_num_chars(SNIPPET_CHARS);
        let title = SnippetGenerator::create(&searcher, &*query, f.title)?;
        let mut hits = Vec::new();
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr)?;
            let text = |field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            let turn = doc.get_first(f.turn).and_then(|v| v.as_u64()).unwrap_or(0);
            let (snippet, shown_title) = if turn == 0 {
                (title.snippet_from_doc(&doc), text(f.title))
            } else {
                (body.snippet_from_doc(&doc), text(f.label))
            };
            let mut fragment = snippet.fragment().to_owned();
            let mut highlights: Vec<(usize, usize)> = snippet
                .highlighted()
                .iter()
                .map(|r| (r.start, r.end))
                .collect();
            if fragment.is_empty() {
                fragment = if turn == 0 {
                    shown_title.clone()
                } else {
                    text(f.body).chars().take(SNIPPET_CHARS).collect()
                };
                highlights.clear();
            }
            hits.push(Hit {
                session_id: text(f.sid),
                folder: text(f.folder),
                agent: text(f.agent),
                title: shown_title,
                turn: u32::try_from(turn).unwrap_or(u32::MAX),
                at: doc.get_first(f.at).and_then(|v| v.as_i64()).unwrap_or(0),
                snippet: fragment,
                highlights,
                score,
            });
        }
        Ok(hits)
    }
}

/// `text` as a query that means only its words: what is not a letter or a
/// digit becomes a space (the index's tokenizer splits there anyway, so
/// nothing findable is lost), words are lowercased (so `AND`, `OR`, `NOT`
/// are words, not operators), and `"quoted phrases"` stay phrases. `fox:*`
/// thus searches for "fox" instead of a field named fox.
fn literal(text: &str) -> String {
    fn words(part: &str) -> Vec<String> {
        part.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }
    let parts: Vec<&str> = text.split('"').collect();
    let closed = if parts.len() % 2 == 1 {
        parts.len()
    } else {
        // An unclosed quote: its text is plain words.
        parts.len() - 1
    };
    let mut out: Vec<String> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let found = words(part);
        if i % 2 == 1 && i < closed && found.len() > 1 {
            out.push(format!("\"{}\"", found.join(" ")));
        } else {
            out.extend(found);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::literal;

    #[test]
    fn query_syntax_is_taken_as_words() {
        assert_eq!(literal("fox:*"), "fox");
        assert_eq!(literal("title:x AND (y OR -z)^2"), "title x and y or z 2");
        assert_eq!(literal("a \"Quick  brown\" fox"), "a \"quick brown\" fox");
        assert_eq!(literal("\"one\" \"open ended"), "one open ended");
        assert_eq!(literal("*:* [] {}"), "");
        assert_eq!(literal("über-straße"), "über straße");
    }
}
