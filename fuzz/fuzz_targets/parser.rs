#![no_main]

// Every text parser of the collector registry; USESCOPE_FUZZ_TARGET picks
// one (see fuzz/src/lib.rs and fuzz/run-all.sh). It is resolved in init,
// before libFuzzer starts, so `list` and a bad name exit cleanly.

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        usescope_fuzz::selected();
    },
    |data: &[u8]| {
        usescope_fuzz::run_bytes(usescope_fuzz::selected(), data);
    }
);
