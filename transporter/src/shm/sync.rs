//! The atomic word the ring algorithm is written against, so the same code runs on `std` atomics
//! in a mapped segment and on loom's atomics in the model tests (`loom_tests`).

use std::sync::atomic::Ordering;

/// A 64-bit atomic word with the few operations the ring and the wake-up protocol use.
///
/// The real segment uses [`std::sync::atomic::AtomicU64`], which has the layout of a `u64`, so a
/// control block can live in shared memory; the loom models use `loom::sync::atomic::AtomicU64`
/// on the heap, so loom explores every interleaving of the very same ring code.
pub(crate) trait AtomicWord: Sync {
    /// A word holding `value`.
    #[cfg(test)]
    fn with_value(value: u64) -> Self;
    /// Loads the word.
    fn load_word(&self, order: Ordering) -> u64;
    /// Stores the word.
    fn store_word(&self, value: u64, order: Ordering);
    /// Swaps the word, returning the previous value (a read-modify-write).
    fn swap_word(&self, value: u64, order: Ordering) -> u64;
}

impl AtomicWord for std::sync::atomic::AtomicU64 {
    #[cfg(test)]
    fn with_value(value: u64) -> Self {
        Self::new(value)
    }
    fn load_word(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    fn store_word(&self, value: u64, order: Ordering) {
        self.store(value, order);
    }
    fn swap_word(&self, value: u64, order: Ordering) -> u64 {
        self.swap(value, order)
    }
}

#[cfg(test)]
impl AtomicWord for loom::sync::atomic::AtomicU64 {
    fn with_value(value: u64) -> Self {
        Self::new(value)
    }
    fn load_word(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    fn store_word(&self, value: u64, order: Ordering) {
        self.store(value, order);
    }
    fn swap_word(&self, value: u64, order: Ordering) -> u64 {
        self.swap(value, order)
    }
}
