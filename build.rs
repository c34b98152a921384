//! Generates the gRPC client and server for `proto/` (SGLang's `SglangScheduler`, vendored from
//! `smg-grpc-proto`): protox parses the files in Rust, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["sglang_scheduler.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(files)?;
    Ok(())
}
