#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = agentd::fuzzing::first_header_block(data);
});
