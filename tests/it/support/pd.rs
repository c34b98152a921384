//! Prefill/decode disaggregation fleets: prefill and decode sims, and a gateway in PD mode.

use super::{gateway, get_json, ready, sim, Proc};

/// A prefill sim with its bootstrap port (a free one, read back from `/server_info`).
pub struct Prefill {
    pub sim: Proc,
    pub bootstrap_port: u16,
}

pub async fn prefill_sim(extra: &[&str]) -> Prefill {
    let mut args = vec![
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        "0",
    ];
    args.extend_from_slice(extra);
    let sim = sim(&args).await;
    let info = get_json(&format!("{}/server_info", sim.url)).await;
    let bootstrap_port = info["disaggregation_bootstrap_port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("a bootstrap port");
    Prefill {
        sim,
        bootstrap_port,
    }
}

pub async fn decode_sim(extra: &[&str]) -> Proc {
    let mut args = vec!["--disaggregation-mode", "decode"];
    args.extend_from_slice(extra);
    sim(&args).await
}

/// The PD flags for these workers (SMG's form).
pub fn pd_flags(prefills: &[&Prefill], decodes: &[&Proc]) -> Vec<String> {
    let mut flags = vec!["--pd-disaggregation".to_owned()];
    for p in prefills {
        flags.extend([
            "--prefill".into(),
            p.sim.url.clone(),
            p.bootstrap_port.to_string(),
        ]);
    }
    for d in decodes {
        flags.extend(["--decode".into(), d.url.clone()]);
    }
    flags
}

/// The gateway in PD mode, ready (a healthy worker of each role).
pub async fn pd_gateway(prefills: &[&Prefill], decodes: &[&Proc], extra: &[&str]) -> Proc {
    let mut flags = pd_flags(prefills, decodes);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let gw = gateway(&[], &flags).await;
    ready(&gw).await;
    gw
}
