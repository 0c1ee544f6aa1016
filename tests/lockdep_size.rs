//! Without `lockdep` every lock is exactly as big as before lockdep
//! existed (the sizes below are those of the commit before it, on 64-bit
//! hosts); with it, the locks carry their class.

use core::mem::size_of;

use ksync::LockRef;
use ksync::lockdep::Map;

#[cfg(all(not(feature = "lockdep"), target_pointer_width = "64"))]
#[test]
fn locks_are_unchanged_without_lockdep() {
    use ksync::brlock::BrLock;
    use ksync::lockdep::Acquired;
    use ksync::seqlock::{SeqLock, SeqLockWriteGuard};

    assert_eq!(size_of::<Map>(), 0);
    assert_eq!(size_of::<Acquired<'_>>(), 0);
    assert_eq!(size_of::<LockRef>(), 8);
    assert_eq!(size_of::<ksync::LockRefGuard<'_>>(), 16);
    assert_eq!(size_of::<SeqLock<u64>>(), 24);
    assert_eq!(size_of::<SeqLock<[u64; 4]>>(), 48);
    assert_eq!(size_of::<SeqLockWriteGuard<'_, u64>>(), 40);
    // One cache-padded slot per CPU holding a 4-byte lock and the `u64`.
    assert_eq!(
        size_of::<BrLock<u64>>(),
        size_of::<ksync::percpu::PerCpu<[u64; 2]>>()
    );
    assert_eq!(size_of::<ksync::brlock::LocalGuard<'_, u64>>(), 32);
    assert_eq!(size_of::<ksync::brlock::GlobalGuard<'_, u64>>(), 24);
}

#[cfg(feature = "lockdep")]
#[test]
fn locks_carry_their_class_with_lockdep() {
    assert!(size_of::<Map>() > 0);
    assert_eq!(size_of::<LockRef>(), 8 + size_of::<Map>());
    assert_eq!(align_of::<LockRef>(), 8);
}
