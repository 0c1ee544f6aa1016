/work/wt/spinlock/examples/embedding/target/debug/deps/ksync-06ccb54cd14a0bd0.d: /work/wt/spinlock/src/lib.rs /work/wt/spinlock/src/../arch/mod.rs /work/wt/spinlock/src/../arch/generic.rs /work/wt/spinlock/src/../arch/x86_64.rs /work/wt/spinlock/src/sync.rs /work/wt/spinlock/src/brlock.rs /work/wt/spinlock/src/completion.rs /work/wt/spinlock/src/kernel.rs /work/wt/spinlock/src/kernel/irq.rs /work/wt/spinlock/src/kernel/lockdep_report.rs /work/wt/spinlock/src/kernel/spin.rs /work/wt/spinlock/src/kernel/stall_report.rs /work/wt/spinlock/src/lockdep/mod.rs /work/wt/spinlock/src/lockref/mod.rs /work/wt/spinlock/src/lockref/stats.rs /work/wt/spinlock/src/lockref/word.rs /work/wt/spinlock/src/mutex.rs /work/wt/spinlock/src/percpu.rs /work/wt/spinlock/src/percpu_counter.rs /work/wt/spinlock/src/percpu_rwlock.rs /work/wt/spinlock/src/percpu_rwsem.rs /work/wt/spinlock/src/rcu/mod.rs /work/wt/spinlock/src/rcu/callback.rs /work/wt/spinlock/src/rcu/debug.rs /work/wt/spinlock/src/rcu/list.rs /work/wt/spinlock/src/rcu/list/table.rs /work/wt/spinlock/src/rcu/ptr.rs /work/wt/spinlock/src/rcu/rcu_sync.rs /work/wt/spinlock/src/rcu/read.rs /work/wt/spinlock/src/rcu/srcu.rs /work/wt/spinlock/src/rcu/stall.rs /work/wt/spinlock/src/rwsem.rs /work/wt/spinlock/src/semaphore.rs /work/wt/spinlock/src/seqlock/mod.rs /work/wt/spinlock/src/seqlock/count.rs /work/wt/spinlock/src/seqlock/data.rs /work/wt/spinlock/src/seqlock/lock.rs /work/wt/spinlock/src/seqlock/storage.rs /work/wt/spinlock/src/spinlock.rs /work/wt/spinlock/src/spinlock/guardian.rs /work/wt/spinlock/src/spinlock/irq.rs /work/wt/spinlock/src/spinlock/queued.rs /work/wt/spinlock/src/spinlock/ticket.rs /work/wt/spinlock/src/spinlock/tracked.rs /work/wt/spinlock/src/spinlock/ttas.rs /work/wt/spinlock/src/spinlock/up.rs /work/wt/spinlock/src/wait.rs

/work/wt/spinlock/examples/embedding/target/debug/deps/libksync-06ccb54cd14a0bd0.rmeta: /work/wt/spinlock/src/lib.rs /work/wt/spinlock/src/../arch/mod.rs /work/wt/spinlock/src/../arch/generic.rs /work/wt/spinlock/src/../arch/x86_64.rs /work/wt/spinlock/src/sync.rs /work/wt/spinlock/src/brlock.rs /work/wt/spinlock/src/completion.rs /work/wt/spinlock/src/kernel.rs /work/wt/spinlock/src/kernel/irq.rs /work/wt/spinlock/src/kernel/lockdep_report.rs /work/wt/spinlock/src/kernel/spin.rs /work/wt/spinlock/src/kernel/stall_report.rs /work/wt/spinlock/src/lockdep/mod.rs /work/wt/spinlock/src/lockref/mod.rs /work/wt/spinlock/src/lockref/stats.rs /work/wt/spinlock/src/lockref/word.rs /work/wt/spinlock/src/mutex.rs /work/wt/spinlock/src/percpu.rs /work/wt/spinlock/src/percpu_counter.rs /work/wt/spinlock/src/percpu_rwlock.rs /work/wt/spinlock/src/percpu_rwsem.rs /work/wt/spinlock/src/rcu/mod.rs /work/wt/spinlock/src/rcu/callback.rs /work/wt/spinlock/src/rcu/debug.rs /work/wt/spinlock/src/rcu/list.rs /work/wt/spinlock/src/rcu/list/table.rs /work/wt/spinlock/src/rcu/ptr.rs /work/wt/spinlock/src/rcu/rcu_sync.rs /work/wt/spinlock/src/rcu/read.rs /work/wt/spinlock/src/rcu/srcu.rs /work/wt/spinlock/src/rcu/stall.rs /work/wt/spinlock/src/rwsem.rs /work/wt/spinlock/src/semaphore.rs /work/wt/spinlock/src/seqlock/mod.rs /work/wt/spinlock/src/seqlock/count.rs /work/wt/spinlock/src/seqlock/data.rs /work/wt/spinlock/src/seqlock/lock.rs /work/wt/spinlock/src/seqlock/storage.rs /work/wt/spinlock/src/spinlock.rs /work/wt/spinlock/src/spinlock/guardian.rs /work/wt/spinlock/src/spinlock/irq.rs /work/wt/spinlock/src/spinlock/queued.rs /work/wt/spinlock/src/spinlock/ticket.rs /work/wt/spinlock/src/spinlock/tracked.rs /work/wt/spinlock/src/spinlock/ttas.rs /work/wt/spinlock/src/spinlock/up.rs /work/wt/spinlock/src/wait.rs

/work/wt/spinlock/src/lib.rs:
/work/wt/spinlock/src/../arch/mod.rs:
/work/wt/spinlock/src/../arch/generic.rs:
/work/wt/spinlock/src/../arch/x86_64.rs:
/work/wt/spinlock/src/sync.rs:
/work/wt/spinlock/src/brlock.rs:
/work/wt/spinlock/src/completion.rs:
/work/wt/spinlock/src/kernel.rs:
/work/wt/spinlock/src/kernel/irq.rs:
/work/wt/spinlock/src/kernel/lockdep_report.rs:
/work/wt/spinlock/src/kernel/spin.rs:
/work/wt/spinlock/src/kernel/stall_report.rs:
/work/wt/spinlock/src/lockdep/mod.rs:
/work/wt/spinlock/src/lockref/mod.rs:
/work/wt/spinlock/src/lockref/stats.rs:
/work/wt/spinlock/src/lockref/word.rs:
/work/wt/spinlock/src/mutex.rs:
/work/wt/spinlock/src/percpu.rs:
/work/wt/spinlock/src/percpu_counter.rs:
/work/wt/spinlock/src/percpu_rwlock.rs:
/work/wt/spinlock/src/percpu_rwsem.rs:
/work/wt/spinlock/src/rcu/mod.rs:
/work/wt/spinlock/src/rcu/callback.rs:
/work/wt/spinlock/src/rcu/debug.rs:
/work/wt/spinlock/src/rcu/list.rs:
/work/wt/spinlock/src/rcu/list/table.rs:
/work/wt/spinlock/src/rcu/ptr.rs:
/work/wt/spinlock/src/rcu/rcu_sync.rs:
/work/wt/spinlock/src/rcu/read.rs:
/work/wt/spinlock/src/rcu/srcu.rs:
/work/wt/spinlock/src/rcu/stall.rs:
/work/wt/spinlock/src/rwsem.rs:
/work/wt/spinlock/src/semaphore.rs:
/work/wt/spinlock/src/seqlock/mod.rs:
/work/wt/spinlock/src/seqlock/count.rs:
/work/wt/spinlock/src/seqlock/data.rs:
/work/wt/spinlock/src/seqlock/lock.rs:
/work/wt/spinlock/src/seqlock/storage.rs:
/work/wt/spinlock/src/spinlock.rs:
/work/wt/spinlock/src/spinlock/guardian.rs:
/work/wt/spinlock/src/spinlock/irq.rs:
/work/wt/spinlock/src/spinlock/queued.rs:
/work/wt/spinlock/src/spinlock/ticket.rs:
/work/wt/spinlock/src/spinlock/tracked.rs:
/work/wt/spinlock/src/spinlock/ttas.rs:
/work/wt/spinlock/src/spinlock/up.rs:
/work/wt/spinlock/src/wait.rs:

# env-dep:KSYNC_LOCKDEP_CLASSES
# env-dep:KSYNC_LOCKDEP_DEPENDENCIES
# env-dep:KSYNC_MAX_CPUS
