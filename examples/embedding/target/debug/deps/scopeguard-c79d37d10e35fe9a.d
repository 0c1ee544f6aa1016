/work/wt/spinlock/examples/embedding/target/debug/deps/scopeguard-c79d37d10e35fe9a.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/work/wt/spinlock/examples/embedding/target/debug/deps/libscopeguard-c79d37d10e35fe9a.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs:
