//! Outcome counting for loom models (shared by the loom test files).

/// Counts how often each outcome of a model occurred over all its
/// executions, to check that loom explored them all (a model in which,
/// say, the reader never sees the old element proves nothing).
pub(crate) struct Outcomes(std::sync::Arc<[std::sync::atomic::AtomicUsize; 4]>);

impl Outcomes {
    pub(crate) fn new() -> Self {
        Self(std::sync::Arc::new(Default::default()))
    }

    pub(crate) fn record(&self, which: usize) {
        self.0[which].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Asserts that each of the first `n` outcomes occurred.
    pub(crate) fn assert_all_seen(&self, n: usize) {
        let counts: Vec<usize> = self.0[..n]
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        assert!(
            counts.iter().all(|&c| c > 0),
            "loom did not explore every outcome: {counts:?}"
        );
    }
}

impl Clone for Outcomes {
    fn clone(&self) -> Self {
        Self(std::sync::Arc::clone(&self.0))
    }
}
