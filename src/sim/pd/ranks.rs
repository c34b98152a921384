//! A PD request's DP ranks on the simulator's side: whether a 0.5.23 prefill's KV sender refuses
//! the rank it was routed to, and which prefill rank a decode fetches its KV from.

use std::sync::Arc;

use super::Bootstrap;
use crate::sim::driver::Ticket;
use crate::sim::plan::Plan;
use crate::sim::state::SimState;

/// 0.5.23's KV sender on a prefill worker of several ranks that follow the room refuses a
/// request the router placed on another rank without naming it in `disagg_prefill_dp_rank`
/// (SGLang checks it as the request enters the bootstrap queue; the simulator answers the
/// refusal once the prefill ran). 0.5.9 checks nothing: its decode then looks elsewhere.
pub fn sender_refusal(
    state: &SimState,
    rid: &str,
    room: u64,
    rank: usize,
    bootstrap: &Bootstrap,
) -> Option<String> {
    let n = state.driver.size();
    let follows = state.driver.method() == crate::sim::dp::LoadBalanceMethod::FollowBootstrapRoom;
    let checked = state.version == crate::sim::version::SglangVersion::V0_5_23
        && n > 1
        && follows
        && bootstrap.prefill_rank(state.version).is_none();
    (checked && room % n as u64 != rank as u64).then(|| super::room_conflict(rid, room, rank, n))
}

/// What a decode request asked for its KV.
pub struct Asked<'a> {
    pub rid: &'a str,
    pub room: u64,
    /// The DP rank it named (0.5.9 also looks for the KV on that prefill rank).
    pub named: Option<i64>,
    pub bootstrap: &'a Bootstrap,
}

/// Decode role: fetches the room's KV from the prefill side in the background, from the prefill
/// rank this release looks on, then admits the request to the engine's batch; a failed
/// transfer ends it with SGLang's 500.
pub fn await_kv(
    state: &Arc<SimState>,
    ticket: &Ticket,
    asked: Asked<'_>,
    prompt: Vec<u32>,
    plan: &Plan,
) -> tokio::task::AbortHandle {
    let Asked {
        rid,
        room,
        named,
        bootstrap,
    } = asked;
    let addr = format!(
        "{}:{}",
        bootstrap.bootstrap_host.as_deref().unwrap_or("None"),
        bootstrap
            .bootstrap_port
            .map_or_else(|| "None".to_owned(), |p| p.to_string())
    );
    let driver = Arc::clone(ticket.driver());
    let id = ticket.id();
    let output = plan.output_ids.clone();
    let timeout = state.pd.waiting_timeout;
    let rid = rid.to_owned();
    let version = state.version;
    let hint = bootstrap.prefill_rank(version);
    tokio::spawn(async move {
        let fetched = async {
            let prefill = super::parallel_info(&addr, timeout).await?;
            let rank = version.prefill_rank_for_decode(named, hint, room, prefill);
            if let Some(r) = rank.filter(|&r| r < 0 || r >= prefill.dp_size as i64) {
                return Err(super::KvFailure::NoRank { dp_group: r });
            }
            super::fetch_kv(&addr, room, rank, timeout).await
        };
        match fetched.await {
            Ok(info) => {
                driver.admit_transferred(id, prompt, output, info.cached_tokens);
            }
            Err(failure) => driver.fail(id, failure.message(&rid, room), 500),
        }
    })
    .abort_handle()
}
