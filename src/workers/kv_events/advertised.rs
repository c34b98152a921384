//! Where a worker's KV events come from: its `/server_info` (`kv_events_config`, `dp_size`,
//! `page_size`, `max_total_num_tokens`), or `--kv-events-endpoint`. A `*`, `0.0.0.0` or `::`
//! host is the worker URL's host; DP rank `r` publishes at port + `r`.

use serde_json::Value;

/// `--kv-events-endpoint WORKER_URL=ENDPOINT[,REPLAY_ENDPOINT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointOverride {
    pub url: String,
    pub endpoint: String,
    pub replay: Option<String>,
}

impl EndpointOverride {
    pub fn parse(s: &str) -> Result<EndpointOverride, String> {
        let bad = || format!("`{s}` is not WORKER_URL=tcp://HOST:PORT[,tcp://HOST:PORT]");
        let (url, rest) = s.split_once('=').ok_or_else(bad)?;
        let (endpoint, replay) = match rest.split_once(',') {
            Some((e, r)) => (e, Some(r)),
            None => (rest, None),
        };
        let tcp = |e: &str| e.starts_with("tcp://");
        if url.is_empty() || !tcp(endpoint) || !replay.is_none_or(tcp) {
            return Err(bad());
        }
        Ok(EndpointOverride {
            url: url.trim_end_matches('/').to_owned(),
            endpoint: endpoint.to_owned(),
            replay: replay.map(str::to_owned),
        })
    }
}

/// One rank's publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publisher {
    pub endpoint: String,
    pub replay: Option<String>,
    pub topic: String,
    pub rank: u32,
}

/// What `/server_info` says about a worker's KV events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub publishers: Vec<Publisher>,
    pub page_size: usize,
    pub capacity_tokens: Option<usize>,
}

/// The endpoint with a wildcard host replaced by `host` and the port moved by `rank`.
fn resolve(endpoint: &str, host: &str, rank: u32) -> Option<String> {
    let rest = endpoint.strip_prefix("tcp://")?;
    let (h, port) = rest.rsplit_once(':')?;
    let port: u32 = port.parse().ok()?;
    let port = u16::try_from(port + rank).ok()?;
    let h = if ["*", "0.0.0.0", "::", "[::]"].contains(&h) {
        host
    } else {
        h
    };
    Some(format!("tcp://{h}:{port}"))
}

/// Reads `/server_info`; `None` when the worker publishes no events (or the override names
/// none). `worker_host` replaces a wildcard host.
pub fn advertised(
    info: &Value,
    worker_host: &str,
    overrides: Option<&EndpointOverride>,
) -> Option<Advertised> {
    let cfg = match info.get("kv_events_config") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
        Some(v @ Value::Object(_)) => Some(v.clone()),
        _ => None,
    };
    let cfg = cfg.unwrap_or(Value::Null);
    let publisher = cfg
        .get("publisher")
        .and_then(Value::as_str)
        .unwrap_or("null");
    if publisher != "zmq" && overrides.is_none() {
        return None;
    }
    let endpoint = match overrides {
        Some(o) => o.endpoint.as_str(),
        None => cfg
            .get("endpoint")
            .and_then(Value::as_str)
            .unwrap_or("tcp://*:5557"),
    };
    let replay = match overrides {
        Some(o) => o.replay.as_deref(),
        None => cfg.get("replay_endpoint").and_then(Value::as_str),
    };
    let topic = cfg.get("topic").and_then(Value::as_str).unwrap_or("");
    let dp = info
        .get("dp_size")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .clamp(1, 1024);
    let publishers = (0..dp as u32)
        .filter_map(|rank| {
            Some(Publisher {
                endpoint: resolve(endpoint, worker_host, rank)?,
                replay: replay.and_then(|r| resolve(r, worker_host, rank)),
                topic: topic.to_owned(),
                rank,
            })
        })
        .collect();
    let size = |k: &str| {
        info.get(k)
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
    };
    Some(Advertised {
        publishers,
        page_size: size("page_size").unwrap_or(1).max(1),
        capacity_tokens: size("max_total_num_tokens"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_server_info() {
        let info = json!({
            "kv_events_config": "{\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://*:5600\",\"topic\":\"kv\"}",
            "dp_size": 2, "page_size": 16, "max_total_num_tokens": 12288
        });
        let a = advertised(&info, "10.0.0.7", None).unwrap();
        assert_eq!((a.page_size, a.capacity_tokens), (16, Some(12288)));
        assert_eq!(
            a.publishers[1],
            Publisher {
                endpoint: "tcp://10.0.0.7:5558".into(),
                replay: Some("tcp://10.0.0.7:5601".into()),
                topic: "kv".into(),
                rank: 1
            }
        );
        let concrete =
            json!({"kv_events_config": {"publisher": "zmq", "endpoint": "tcp://127.0.0.1:7000"}});
        assert_eq!(
            advertised(&concrete, "h", None).unwrap().publishers[0].endpoint,
            "tcp://127.0.0.1:7000"
        );
        assert_eq!(
            advertised(&json!({"kv_events_config": null}), "h", None),
            None
        );
        let o = EndpointOverride::parse("http://w:1/=tcp://*:9000,tcp://*:9001").unwrap();
        assert_eq!(o.url, "http://w:1");
        let over = advertised(&json!({}), "h", Some(&o)).unwrap();
        assert_eq!(over.publishers[0].endpoint, "tcp://h:9000");
        assert_eq!(over.publishers[0].replay.as_deref(), Some("tcp://h:9001"));
        assert!(EndpointOverride::parse("http://w=udp://x:1").is_err());
    }
}
