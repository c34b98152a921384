//! The allocator the `switchboard` binary runs with (src/main.rs; why: Cargo.toml), so that an
//! in-process bench measures the gateway's code as it runs. Each such bench includes this file
//! with `#[path = "common/allocator.rs"] mod allocator;`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
