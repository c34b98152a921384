//! The DP rank a router asks a data-parallel worker (`--dp-size N`) to run a request on. The
//! field is `data_parallel_rank` up to 0.5.9; later releases read `routed_dp_rank` and keep
//! `data_parallel_rank` as a deprecated alias (`managers/io_struct.py`), so the old name is sent
//! to every release before 0.5.23 (the first we know reads the new one) and the new name from it.

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

/// One rank of a data-parallel worker, as a request field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpRank {
    pub rank: u32,
    pub field: RankField,
}

/// Serialized as the one field (flattened into a request body).
impl Serialize for DpRank {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(self.field.name(), &self.rank)?;
        map.end()
    }
}

impl DpRank {
    /// A forwarded JSON body with the rank set (a client's own rank fields are replaced);
    /// `None` if the body is not a JSON object.
    pub fn inject(&self, body: &[u8]) -> Option<Vec<u8>> {
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).ok()?;
        map.remove(RankField::DataParallelRank.name());
        map.remove(RankField::RoutedDpRank.name());
        map.insert(self.field.name().into(), self.rank.into());
        serde_json::to_vec(&map).ok()
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
            field: RankField::RoutedDpRank,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"routed_dp_rank":2}"#
        );
        let body = r#"{"text":"hi","data_parallel_rank":0,"routed_dp_rank":3}"#;
        let v: serde_json::Value =
            serde_json::from_slice(&r.inject(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(v["routed_dp_rank"], 2);
        assert!(v.get("data_parallel_rank").is_none());
        assert!(r.inject(b"[1]").is_none());
    }
}
