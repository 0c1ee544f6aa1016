//! Placeholder, replaced by the lockref benchmark.
fn main() {}
