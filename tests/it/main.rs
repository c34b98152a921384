//! Every integration test, in one binary (one link step instead of one per file), in two tiers:
//! `in_process` drives the gateway's router directly (no process, no socket); the other modules
//! run real `switchboard` processes (simulated workers and gateways) on 127.0.0.1.
//!
//! Run one module with a filter: `cargo test --test it reliability::`.
//!
//! Tests may panic on what they did not expect: `unwrap`/`expect` are allowed here (and only in
//! test, bench and fuzz crates; see `[lints]` in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_process;
mod support;

mod admission;
mod background_work;
mod config_file;
mod discovery;
mod dp;
mod dp_grpc;
mod ending;
mod front_doors;
mod gateway_core;
mod grpc_fleet;
mod grpc_workers;
pub mod hostile_input;
mod hub_tokenizers;
mod kv_event_faults;
mod kv_events;
mod layering;
mod migration;
mod models;
mod openai_choices;
mod openai_native;
mod pd;
mod pd_dp;
mod python_clients;
mod real_engine;
mod reasoning_gateway;
mod reasoning_oracle;
mod reliability;
mod request_ids;
mod request_props;
mod retry_backoff;
mod served_name;
mod sglang_modes;
mod sglang_refusals;
mod sim_lifecycle;
mod sim_logprobs;
mod sim_metrics;
mod sim_openai_n;
mod sim_script;
mod sim_versions;
mod simulator;
mod speculative;
mod stream_gathering;
mod tls;
mod tool_call_constraints;
mod tool_call_families;
mod tool_call_oracle;
mod tool_calls_gateway;
mod traces;
mod whole_answers;
mod worker_addresses;
mod worker_connections;
mod worker_threads;
mod workers_admin;
