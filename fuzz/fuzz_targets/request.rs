#![no_main]

use libfuzzer_sys::fuzz_target;

// Included by path, not through the library: the parser smoke test
// includes fuzz/src/lib.rs and should not build the router harness.
#[path = "../src/request.rs"]
mod request;

fuzz_target!(|data: &[u8]| request::request(data));
