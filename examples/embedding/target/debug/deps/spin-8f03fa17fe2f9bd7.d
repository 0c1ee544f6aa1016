/work/wt/spinlock/examples/embedding/target/debug/deps/spin-8f03fa17fe2f9bd7.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/relax.rs

/work/wt/spinlock/examples/embedding/target/debug/deps/libspin-8f03fa17fe2f9bd7.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/relax.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/spin-0.12.3/src/relax.rs:
