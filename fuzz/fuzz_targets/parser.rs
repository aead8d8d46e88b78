#![no_main]

// Every text parser of the collector registry; USESCOPE_FUZZ_TARGET picks
// one (see fuzz/src/lib.rs and fuzz/run-all.sh).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    usescope_fuzz::run_bytes(usescope_fuzz::selected(), data);
});
