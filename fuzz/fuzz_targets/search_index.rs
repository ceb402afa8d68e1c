#![no_main]

// tantivy panics on some damaged files and agentd catches those panics;
// libFuzzer's hook would abort on them, so tantivy's are passed over in
// silence. A panic that escapes agentd's code still aborts (fuzz_target!).
static QUIET: std::sync::Once = std::sync::Once::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    QUIET.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_tantivy = info.location().is_some_and(|l| l.file().contains("tantivy"));
            if !in_tantivy {
                default(info);
            }
        }));
    });
    let _ = agentd::fuzzing::search_index(data);
});
