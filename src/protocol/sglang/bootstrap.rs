//! The fields that pair a prefill and a decode worker (SGLang's `GenerateReqInput` and OpenAI
//! requests alike): the prefill worker's host and bootstrap port, and a room both legs share.

use serde::Serialize;

use super::DpRank;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bootstrap {
    pub bootstrap_host: String,
    /// `None` (sent as `null`) when the prefill worker was given without one, as SMG sends it.
    pub bootstrap_port: Option<u16>,
    /// A random integer in [0, 2^63 − 1] (SGLang keeps it in an int64).
    pub bootstrap_room: u64,
}

impl Bootstrap {
    /// A new room on the prefill worker at `host`; with the prefill unit's DP rank, a room whose
    /// residue modulo the worker's `dp_size` is that rank, which is where every release's
    /// decode looks for the KV when not told otherwise (see `dp_rank`).
    pub fn new(host: &str, port: Option<u16>, prefill_rank: Option<DpRank>) -> Bootstrap {
        let mut room = rand::random::<u64>() >> 1;
        if let Some(r) = prefill_rank.filter(|r| r.size > 1 && r.rank < r.size) {
            let size = u64::from(r.size);
            room = room - room % size + u64::from(r.rank);
            if room > i64::MAX as u64 {
                room -= size;
            }
        }
        Bootstrap {
            bootstrap_host: host.to_owned(),
            bootstrap_port: port,
            bootstrap_room: room,
        }
    }

    /// A forwarded JSON body with these fields set (a client's own are replaced), and `rid`
    /// when given; `None` if the body is not a JSON object.
    pub fn inject(&self, body: &[u8], rid: Option<&str>) -> Option<Vec<u8>> {
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).ok()?;
        if let Some(rid) = rid {
            map.insert("rid".into(), rid.into());
        }
        map.insert("bootstrap_host".into(), self.bootstrap_host.clone().into());
        map.insert("bootstrap_port".into(), self.bootstrap_port.into());
        map.insert("bootstrap_room".into(), self.bootstrap_room.into());
        serde_json::to_vec(&map).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_fit_an_int64_and_fields_are_injected() {
        for rank in 0..3 {
            let r = super::super::RankField::RoutedDpRank;
            let on = Bootstrap::new(
                "h",
                None,
                Some(DpRank {
                    rank,
                    size: 3,
                    field: r,
                }),
            );
            assert_eq!(on.bootstrap_room % 3, u64::from(rank));
            assert!(on.bootstrap_room <= i64::MAX as u64);
        }
        let b = Bootstrap::new("10.0.0.2", Some(8998), None);
        assert!(b.bootstrap_room <= i64::MAX as u64);
        let out = b
            .inject(
                br#"{"model":"m","bootstrap_room":1,"stream":true,"rid":"a"}"#,
                Some("r1-a"),
            )
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["bootstrap_room"], b.bootstrap_room);
        assert_eq!(v["bootstrap_host"], "10.0.0.2");
        assert_eq!(v["bootstrap_port"], 8998);
        assert_eq!(v["stream"], true);
        assert_eq!(v["rid"], "r1-a");
        assert!(b.inject(b"[1]", None).is_none());
        let none = Bootstrap::new("h", None, None).inject(b"{}", None).unwrap();
        assert!(String::from_utf8(none)
            .unwrap()
            .contains("\"bootstrap_port\":null"));
    }
}
