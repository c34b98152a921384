//! The allocator the `switchboard` binary runs with (src/main.rs; why: Cargo.toml), so that an
//! in-process bench measures the gateway's code as it runs. Each such bench includes this file
//! with `#[path = "common/allocator.rs"] mod allocator;`.
//! The binary also sets mimalloc's purge delay to 10 s (src/main.rs); these benches keep its
//! default unless run with `MIMALLOC_PURGE_DELAY=10000`, as criterion's generated `main` gives
//! no place to set it first.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
