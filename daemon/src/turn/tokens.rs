//! Counting tokens where no server reported them: OpenAI's own tokenizers for
//! OpenAI model names, bytes / 4 for others; a big text costs a bounded sample.

use agentx_shared::conversation::Item;
use tiktoken_rs::CoreBPE;

/// What each message costs beyond its text (role, separators).
const PER_ITEM: u64 = 4;

/// What one image a tool returned is counted as: about a 1024×1024 image at
/// OpenAI's high detail (765 tokens), rounded up; servers report the truth.
pub const IMAGE_TOKENS: u64 = 800;

/// Texts longer than this are counted on three windows of [`WINDOW`]
/// bytes (head, middle, tail) and scaled: a turn's accounting stays under
/// a tenth of a millisecond whatever its sizes (`scripts/bench context`).
const SAMPLE: usize = 384;
const WINDOW: usize = SAMPLE / 3;

/// Counts tokens the way one model family does.
#[derive(Clone, Copy)]
pub struct Counter {
    bpe: Option<&'static CoreBPE>,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.bpe.is_some() {
            "tiktoken"
        } else {
            "bytes/4"
        })
    }
}

impl Counter {
    /// The tokenizer of `model` when it is an OpenAI model name, else bytes / 4.
    pub fn for_model(model: &str) -> Self {
        let name = model.rsplit('/').next().unwrap_or(model);
        let bpe = tiktoken_rs::tokenizer::get_tokenizer(name)
            .and_then(|t| tiktoken_rs::bpe_for_tokenizer(t).ok());
        Self { bpe }
    }

    /// bytes / 4, whatever the model.
    #[cfg(test)]
    pub fn bytes() -> Self {
        Self { bpe: None }
    }

    /// Whether a real tokenizer counts (else bytes / 4).
    #[cfg(test)]
    pub fn exact(&self) -> bool {
        self.bpe.is_some()
    }

    /// Tokens of `text`.
    pub fn text(&self, text: &str) -> u64 {
        let Some(bpe) = self.bpe else {
            return (text.len() as u64).div_ceil(4);
        };
        if text.len() <= SAMPLE {
            return bpe.encode_ordinary(text).len() as u64;
        }
        let window = |at: usize| {
            let mut start = at;
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + WINDOW).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            &text[start..end]
        };
        let middle = text.len() / 2 - WINDOW / 2;
        let windows = [window(0), window(middle), window(text.len() - WINDOW)];
        let sampled: usize = windows.iter().map(|w| bpe.encode_ordinary(w).len()).sum();
        let bytes: usize = windows.iter().map(|w| w.len()).sum();
        (sampled as f64 * text.len() as f64 / bytes.max(1) as f64).ceil() as u64
    }

    /// Tokens of one transcript item as the model sees it.
    pub fn item(&self, item: &Item) -> u64 {
        PER_ITEM
            + match item {
                Item::User { text } | Item::Assistant { text } => self.text(text),
                Item::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => self.text(call_id) + self.text(name) + self.text(arguments),
                Item::FunctionOutput {
                    call_id,
                    output,
                    images,
                } => self.text(call_id) + self.text(output) + IMAGE_TOKENS * images.len() as u64,
                Item::Compaction { context, .. } => self.items(context),
            }
    }

    pub fn items(&self, items: &[Item]) -> u64 {
        items.iter().map(|i| self.item(i)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_count_with_their_tokenizer_others_by_bytes() {
        let gpt = Counter::for_model("gpt-4o");
        assert!(gpt.exact());
        assert_eq!(gpt.text("hello world"), 2);
        let local = Counter::for_model("smollm2-135m");
        assert!(!local.exact());
        assert_eq!(local.text("hello world"), 3);
        assert!(Counter::for_model("openai/gpt-4.1").exact());
    }

    #[test]
    fn a_big_text_is_sampled_within_a_tenth() {
        let gpt = Counter::for_model("gpt-4o");
        let text = "fn main() { println!(\"hello\"); }\n".repeat(4000);
        let exact = tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(&text)
            .len() as f64;
        let counted = gpt.text(&text) as f64;
        assert!(
            (counted - exact).abs() / exact < 0.1,
            "{counted} vs {exact}"
        );
        // Prose then code: the three windows see both.
        let mixed = format!(
            "{}{}",
            "The quick brown fox jumps over the lazy dog. ".repeat(300),
            "let x = vec![1, 2, 3]; // numbers\n".repeat(300)
        );
        let exact = tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(&mixed)
            .len() as f64;
        let counted = gpt.text(&mixed) as f64;
        assert!(
            (counted - exact).abs() / exact < 0.25,
            "{counted} vs {exact}"
        );
    }
}
