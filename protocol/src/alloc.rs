//! The memory allocator of every Open Conduit program.
//!
//! Each message crossing a daemon is a burst of short-lived allocations (the
//! line read, the JSON tree of its params, the encoded answer), freed on another
//! task or in another order than made. Under the 64-sender intake load glibc's
//! allocator was 26–36% of each daemon's CPU (`malloc_consolidate`,
//! `unlink_chunk`, `_int_free`). With mimalloc the suite's CPU a delivery fell
//! by 2–17% and its deliveries a second rose in four sets of interleaved runs
//! (docs/benchmarks.md, "seventh session"; docs/decisions.md, "Intake speed,
//! sixth step").
//!
//! Declared here because every program links this crate: the daemons, the
//! extensions, the CLI and the tests all run on the same allocator.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
