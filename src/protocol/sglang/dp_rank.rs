//! The DP rank a router asks a data-parallel worker (`--dp-size N`) to run a request on. The
//! field is `data_parallel_rank` up to 0.5.9; later releases read `routed_dp_rank` and keep
//! `data_parallel_rank` as a deprecated alias (`managers/io_struct.py`), so the old name is sent
//! to every release before 0.5.23 (the first we know reads the new one) and the new name from it.
//!
//! A PD pair must also agree on the prefill rank that holds the KV (`disaggregation/`):
//! - 0.5.9's decode looks for it at its own `data_parallel_rank` when the request names one,
//!   else at `bootstrap_room % prefill dp_size` (`CommonKVReceiver`); its prefill runs a named
//!   rank whatever the room.
//! - 0.5.23 reads `disagg_prefill_dp_rank` on both legs; without it its decode takes the room's
//!   residue (prefill `follow_bootstrap_room`, the default) and its prefill fails a request whose
//!   routed rank is not the room's residue ("follow_bootstrap_room conflict").
//!
//! So the room of a pair whose prefill unit has rank `p` is drawn with residue `p`
//! (`Bootstrap::new`), which every release reads the same way; a 0.5.23 leg is also told `p`;
//! a 0.5.9 decode leg names its own rank only when it is `p` (naming another would send it
//! looking for the KV there), and otherwise lets the worker place it.

use serde::ser::SerializeMap;
use serde::Serialize;

/// Which name a worker's release reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankField {
    DataParallelRank,
    RoutedDpRank,
}

impl RankField {
    /// From `/server_info`'s `version` (`None` or unparsable: the old name, which all read).
    pub fn for_version(version: Option<&str>) -> RankField {
        let parsed: Option<Vec<u64>> = version.map(|v| {
            v.split(['.', '-', '+', 'r', 'p'])
                .take(3)
                .map_while(|p| p.parse().ok())
                .collect()
        });
        match parsed.as_deref() {
            Some([major, minor, patch, ..]) if (*major, *minor, *patch) >= (0, 5, 23) => {
                RankField::RoutedDpRank
            }
            Some([major, minor, ..]) if (*major, *minor) > (0, 5) => RankField::RoutedDpRank,
            _ => RankField::DataParallelRank,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RankField::DataParallelRank => "data_parallel_rank",
            RankField::RoutedDpRank => "routed_dp_rank",
        }
    }
}

/// 0.5.23's PD field: the prefill rank that holds the request's KV.
const PREFILL_RANK_FIELD: &str = "disagg_prefill_dp_rank";

/// One rank of a data-parallel worker of `size` ranks, and the name its release reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpRank {
    pub rank: u32,
    pub size: u32,
    pub field: RankField,
}

/// Which part of a PD pair a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pairing {
    /// Not a PD request.
    #[default]
    Alone,
    PrefillLeg,
    /// The decode leg, with its prefill unit's rank (`None`: the prefill is routed whole).
    DecodeLeg {
        prefill: Option<DpRank>,
    },
}

/// The rank fields one request carries (see the module doc for the PD rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LegRanks {
    /// The rank of the unit the request was routed to (`None`: the worker balances itself).
    pub own: Option<DpRank>,
    pub pairing: Pairing,
}

impl LegRanks {
    pub fn alone(own: Option<DpRank>) -> LegRanks {
        LegRanks {
            own,
            pairing: Pairing::Alone,
        }
    }

    fn entries(&self) -> Vec<(&'static str, u32)> {
        let Some(own) = self.own else {
            return Vec::new();
        };
        match (own.field, self.pairing) {
            (RankField::DataParallelRank, Pairing::DecodeLeg { prefill }) => {
                if own.rank == prefill.map_or(0, |p| p.rank) {
                    vec![(own.field.name(), own.rank)]
                } else {
                    Vec::new()
                }
            }
            (RankField::DataParallelRank, _) => vec![(own.field.name(), own.rank)],
            (RankField::RoutedDpRank, Pairing::Alone) => vec![(own.field.name(), own.rank)],
            (RankField::RoutedDpRank, Pairing::PrefillLeg) => {
                vec![(own.field.name(), own.rank), (PREFILL_RANK_FIELD, own.rank)]
            }
            (RankField::RoutedDpRank, Pairing::DecodeLeg { prefill }) => {
                let mut e = vec![(own.field.name(), own.rank)];
                e.extend(prefill.map(|p| (PREFILL_RANK_FIELD, p.rank)));
                e
            }
        }
    }

    /// A forwarded JSON body with these fields set (a client's own rank fields are replaced);
    /// `None` if the body is not a JSON object.
    pub fn inject(&self, body: &[u8]) -> Option<Vec<u8>> {
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).ok()?;
        map.remove(RankField::DataParallelRank.name());
        map.remove(RankField::RoutedDpRank.name());
        map.remove(PREFILL_RANK_FIELD);
        for (name, rank) in self.entries() {
            map.insert(name.into(), rank.into());
        }
        serde_json::to_vec(&map).ok()
    }
}

/// Serialized as its fields (flattened into a request body).
impl Serialize for LegRanks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let entries = self.entries();
        let mut map = s.serialize_map(Some(entries.len()))?;
        for (name, rank) in entries {
            map.serialize_entry(name, &rank)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_follows_the_release() {
        use RankField::*;
        assert_eq!(RankField::for_version(Some("0.5.9")), DataParallelRank);
        assert_eq!(RankField::for_version(Some("0.5.22")), DataParallelRank);
        assert_eq!(RankField::for_version(Some("0.5.23")), RoutedDpRank);
        assert_eq!(RankField::for_version(Some("0.5.23.post1")), RoutedDpRank);
        assert_eq!(RankField::for_version(Some("0.6.0rc1")), RoutedDpRank);
        assert_eq!(RankField::for_version(Some("dev")), DataParallelRank);
        assert_eq!(RankField::for_version(None), DataParallelRank);
    }

    #[test]
    fn serialized_and_injected_under_its_name() {
        let r = DpRank {
            rank: 2,
            size: 4,
            field: RankField::RoutedDpRank,
        };
        assert_eq!(
            serde_json::to_string(&LegRanks::alone(Some(r))).unwrap(),
            r#"{"routed_dp_rank":2}"#
        );
        let body =
            r#"{"text":"hi","data_parallel_rank":0,"routed_dp_rank":3,"disagg_prefill_dp_rank":1}"#;
        let v: serde_json::Value =
            serde_json::from_slice(&LegRanks::alone(Some(r)).inject(body.as_bytes()).unwrap())
                .unwrap();
        assert_eq!(v["routed_dp_rank"], 2);
        assert!(v.get("data_parallel_rank").is_none());
        assert!(v.get("disagg_prefill_dp_rank").is_none());
        assert!(LegRanks::alone(Some(r)).inject(b"[1]").is_none());
    }

    #[test]
    fn pd_legs_agree_on_the_prefill_rank_in_each_release() {
        let rank = |rank, field| DpRank {
            rank,
            size: 2,
            field,
        };
        let json = |r: LegRanks| serde_json::to_string(&r).unwrap();
        let new = |r| rank(r, RankField::RoutedDpRank);
        let old = |r| rank(r, RankField::DataParallelRank);
        let prefill = LegRanks {
            own: Some(new(1)),
            pairing: Pairing::PrefillLeg,
        };
        assert_eq!(
            json(prefill),
            r#"{"routed_dp_rank":1,"disagg_prefill_dp_rank":1}"#
        );
        let decode = |own, prefill| LegRanks {
            own: Some(own),
            pairing: Pairing::DecodeLeg { prefill },
        };
        assert_eq!(
            json(decode(new(0), Some(new(1)))),
            r#"{"routed_dp_rank":0,"disagg_prefill_dp_rank":1}"#
        );
        assert_eq!(json(decode(new(1), None)), r#"{"routed_dp_rank":1}"#);
        // 0.5.9's decode reads its own rank as the prefill's: named only when they agree.
        assert_eq!(json(decode(old(0), Some(old(1)))), "{}");
        assert_eq!(
            json(decode(old(1), Some(old(1)))),
            r#"{"data_parallel_rank":1}"#
        );
        assert_eq!(json(decode(old(1), None)), "{}");
        assert_eq!(json(decode(old(0), None)), r#"{"data_parallel_rank":0}"#);
    }
}
