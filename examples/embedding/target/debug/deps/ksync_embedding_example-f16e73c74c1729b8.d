/work/wt/spinlock/examples/embedding/target/debug/deps/ksync_embedding_example-f16e73c74c1729b8.d: src/main.rs

/work/wt/spinlock/examples/embedding/target/debug/deps/libksync_embedding_example-f16e73c74c1729b8.rmeta: src/main.rs

src/main.rs:
