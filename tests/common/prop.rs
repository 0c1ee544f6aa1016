//! Helpers shared by the property tests (`tests/prop_*.rs`), each of which
//! includes this file with `#[path]`.

use std::sync::{Mutex, MutexGuard, Once};

/// The tests compare process-wide state (statistics, every CPU's
/// callbacks): one at a time.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hides the panics whose message starts with `expected` (the misuse
/// reports under test), keeping every other panic's message. The first
/// call in a test binary installs the hook; a binary passes one prefix.
pub(crate) fn quiet_expected_panics(expected: &'static str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !msg.starts_with(expected) {
                default(info);
            }
        }));
    });
}

/// The cases per property: 256 in debug builds, 1024 in release.
pub(crate) fn config() -> proptest::prelude::ProptestConfig {
    proptest::prelude::ProptestConfig {
        cases: if cfg!(debug_assertions) { 256 } else { 1024 },
        ..proptest::prelude::ProptestConfig::default()
    }
}
