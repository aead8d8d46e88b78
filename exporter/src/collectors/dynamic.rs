//! Metric families whose names the kernel supplies at run time:
//! `node_netstat_TcpExt_ListenOverflows`, `node_sockstat_TCP_inuse`.
//!
//! Each `(group, field)` pair gets its name and help text built once and
//! kept here, so a scrape only looks them up. The kernel's field sets are
//! small and fixed; [`DynamicFamilies::MAX`] bounds the table against a file
//! that keeps inventing names.

use crate::kernel::error::ParseError;
use crate::scrape::exposition::{Encoder, MetricType, Value, help_is_plain};

/// Index of a family in its [`DynamicFamilies`].
pub type FamilyId = usize;

struct Entry {
    group: Box<str>,
    field: Box<str>,
    name: Box<str>,
    help: Box<str>,
    help_plain: bool,
}

pub struct DynamicFamilies {
    kind: MetricType,
    entries: Vec<Entry>,
}

impl DynamicFamilies {
    pub const MAX: usize = 4096;

    pub fn new(kind: MetricType) -> DynamicFamilies {
        DynamicFamilies {
            kind,
            entries: Vec::new(),
        }
    }

    /// The family for `(group, field)`; `name_help` builds its name and
    /// help text the first time the pair is seen.
    pub fn get(
        &mut self,
        group: &str,
        field: &str,
        line: usize,
        name_help: impl FnOnce() -> (String, String),
    ) -> Result<FamilyId, ParseError> {
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| *e.group == *group && *e.field == *field)
        {
            return Ok(i);
        }
        if self.entries.len() >= Self::MAX {
            return Err(ParseError::new(
                line,
                format!(
                    "more than {} distinct metric names; refusing {group}_{field}",
                    Self::MAX
                ),
            ));
        }
        let (name, help) = name_help();
        self.entries.push(Entry {
            group: group.into(),
            field: field.into(),
            name: name.into(),
            help_plain: help_is_plain(&help),
            help: help.into(),
        });
        Ok(self.entries.len() - 1)
    }

    /// Writes the family header and its single unlabelled sample.
    pub fn write(&self, id: FamilyId, enc: &mut Encoder, value: impl Into<Value>) {
        let e = &self.entries[id];
        enc.family_named(&e.name, &e.help, e.help_plain, self.kind);
        enc.sample_named(&e.name, "", &[], None, value.into());
    }

    pub fn name(&self, id: FamilyId) -> &str {
        &self.entries[id].name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_once_and_bounded() {
        let mut d = DynamicFamilies::new(MetricType::Gauge);
        let a = d
            .get("TCP", "inuse", 1, || {
                ("node_sockstat_TCP_inuse".into(), "h".into())
            })
            .unwrap();
        let b = d
            .get("TCP", "inuse", 1, || unreachable!("built once"))
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(d.name(a), "node_sockstat_TCP_inuse");
        for i in 1..DynamicFamilies::MAX {
            d.get("P", &i.to_string(), 1, || ("n".into(), "h".into()))
                .unwrap();
        }
        let e = d
            .get("P", "new", 7, || ("n".into(), "h".into()))
            .unwrap_err();
        assert_eq!(e.line, 7);
    }
}
