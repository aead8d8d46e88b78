#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    usescope_fuzz::run_bytes(usescope_fuzz::text_target("self_stat"), data);
});
