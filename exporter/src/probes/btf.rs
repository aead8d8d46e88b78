//! A small reader for the kernel's BTF (`/sys/kernel/btf/*`), just enough to
//! list enums and their values.
//!
//! Why our own: aya 0.14 parses BTF for CO-RE but keeps its type iterator
//! private, and the drops probe must name drop-reason numbers from the
//! *running* kernel's `enum skb_drop_reason` (the numbers move between
//! kernel versions). The reader is pure and never panics: every offset is
//! checked, and malformed input is an error naming the byte offset.
//!
//! Format (include/uapi/linux/btf.h): a header, then a type section of
//! variable-length records (`btf_type` + kind-specific data), then a string
//! section of NUL-terminated names. Module BTF (`/sys/kernel/btf/<module>`)
//! is *split* BTF: its string offsets continue after vmlinux's strings.

use std::fmt;

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
const TYPE_LEN: usize = 12;

const KIND_ENUM: u32 = 6;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfError {
    /// Byte offset into the BTF blob where reading went wrong.
    pub offset: usize,
    pub msg: String,
}

impl BtfError {
    fn new(offset: usize, msg: impl Into<String>) -> BtfError {
        BtfError {
            offset,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for BtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BTF byte {}: {}", self.offset, self.msg)
    }
}

impl std::error::Error for BtfError {}

/// A parsed BTF blob: borrowed type and string sections.
#[derive(Debug, Clone, Copy)]
pub struct Btf<'a> {
    types: &'a [u8],
    /// Absolute offset of `types` in the blob, for error messages.
    types_at: usize,
    strings: &'a [u8],
    /// For split (module) BTF: the base's strings, which come first in the
    /// string offset space.
    base_strings: &'a [u8],
}

/// One enum type: its name (empty for anonymous enums) and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enum<'a> {
    pub name: &'a str,
    /// (name, value); signed enums are sign-extended into the u64.
    pub members: Vec<(&'a str, u64)>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let bytes = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let bytes = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes(bytes.try_into().ok()?))
}

impl<'a> Btf<'a> {
    /// Parses a standalone BTF blob (vmlinux).
    pub fn parse(data: &'a [u8]) -> Result<Btf<'a>, BtfError> {
        Btf::parse_split(data, None)
    }

    /// Parses module BTF whose string offsets continue after `base`'s.
    pub fn parse_split(data: &'a [u8], base: Option<&Btf<'a>>) -> Result<Btf<'a>, BtfError> {
        let magic = u16_at(data, 0).ok_or_else(|| BtfError::new(0, "truncated header"))?;
        if magic != MAGIC {
            return Err(BtfError::new(
                0,
                format!("bad magic {magic:#06x} (want 0xeb9f, little-endian)"),
            ));
        }
        let field = |i: usize| {
            u32_at(data, 4 + 4 * i)
                .map(|v| v as usize)
                .ok_or_else(|| BtfError::new(4 + 4 * i, "truncated header"))
        };
        let hdr_len = field(0)?;
        if hdr_len < HEADER_LEN {
            return Err(BtfError::new(4, format!("header length {hdr_len} < 24")));
        }
        let section = |off_field: usize, len_field: usize, what: &str| {
            let start = hdr_len
                .checked_add(field(off_field)?)
                .ok_or_else(|| BtfError::new(4, format!("{what} offset overflows")))?;
            let end = start
                .checked_add(field(len_field)?)
                .ok_or_else(|| BtfError::new(4, format!("{what} length overflows")))?;
            data.get(start..end)
                .map(|s| (start, s))
                .ok_or_else(|| BtfError::new(start, format!("{what} section past end of data")))
        };
        let (types_at, types) = section(1, 2, "type")?;
        let (_, strings) = section(3, 4, "string")?;
        Ok(Btf {
            types,
            types_at,
            strings,
            base_strings: base.map_or(&[][..], |b| b.strings),
        })
    }

    /// The NUL-terminated string at `off` in the (possibly split) string space.
    fn string(&self, off: usize) -> Result<&'a str, BtfError> {
        let (section, rel) = if off < self.base_strings.len() {
            (self.base_strings, off)
        } else {
            (self.strings, off - self.base_strings.len())
        };
        let tail = section
            .get(rel..)
            .ok_or_else(|| BtfError::new(off, "string offset past string section"))?;
        let len = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| BtfError::new(off, "unterminated string"))?;
        std::str::from_utf8(&tail[..len]).map_err(|_| BtfError::new(off, "string is not UTF-8"))
    }

    /// Every enum (ENUM and ENUM64) in the type section, in type order.
    pub fn enums(&self) -> Result<Vec<Enum<'a>>, BtfError> {
        let mut out = Vec::new();
        let mut off = 0;
        while off < self.types.len() {
            let at = self.types_at + off;
            let truncated = || BtfError::new(at, "truncated type record");
            let name_off = u32_at(self.types, off).ok_or_else(truncated)? as usize;
            let info = u32_at(self.types, off + 4).ok_or_else(truncated)?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let signed = info >> 31 == 1;
            let data = off + TYPE_LEN;
            let extra = extra_len(kind, vlen)
                .ok_or_else(|| BtfError::new(at, format!("unknown BTF kind {kind}")))?;
            let end = data + extra;
            if end > self.types.len() {
                return Err(truncated());
            }
            if kind == KIND_ENUM || kind == KIND_ENUM64 {
                out.push(self.read_enum(name_off, kind, signed, &self.types[data..end], vlen)?);
            }
            off = end;
        }
        Ok(out)
    }

    fn read_enum(
        &self,
        name_off: usize,
        kind: u32,
        signed: bool,
        data: &[u8],
        vlen: usize,
    ) -> Result<Enum<'a>, BtfError> {
        let mut members = Vec::with_capacity(vlen);
        let step = if kind == KIND_ENUM64 { 12 } else { 8 };
        for rec in data.chunks_exact(step) {
            // chunks_exact guarantees the lengths read below.
            let name = self.string(u32_at(rec, 0).unwrap_or(0) as usize)?;
            let lo = u32_at(rec, 4).unwrap_or(0);
            let value = if kind == KIND_ENUM64 {
                u64::from(u32_at(rec, 8).unwrap_or(0)) << 32 | u64::from(lo)
            } else if signed {
                lo as i32 as i64 as u64
            } else {
                u64::from(lo)
            };
            members.push((name, value));
        }
        Ok(Enum {
            name: self.string(name_off)?,
            members,
        })
    }
}

/// Bytes of kind-specific data after a `btf_type` record; None for kinds
/// this reader does not know (a newer kernel: better to fail than misparse).
fn extra_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        // INT, VAR, DECL_TAG: one u32
        1 | 14 | 17 => 4,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
        // ARRAY: struct btf_array
        3 => 12,
        // STRUCT, UNION: btf_member; DATASEC: btf_var_secinfo; ENUM64
        4 | 5 | 15 | 19 => vlen * 12,
        // ENUM: btf_enum; FUNC_PROTO: btf_param
        6 | 13 => vlen * 8,
        _ => return None,
    })
}

/// Finds the enum called `name`.
pub fn find_enum<'a, 'e>(enums: &'e [Enum<'a>], name: &str) -> Option<&'e Enum<'a>> {
    enums.iter().find(|e| e.name == name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a BTF blob from raw type records and a string section.
    pub(crate) fn blob(types: &[u8], strings: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(1); // version
        b.push(0); // flags
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(types);
        b.extend_from_slice(strings);
        b
    }

    pub(crate) fn type_rec(
        name_off: u32,
        kind: u32,
        vlen: u32,
        signed: bool,
        size: u32,
    ) -> Vec<u8> {
        let info = (kind << 24) | vlen | if signed { 1 << 31 } else { 0 };
        [name_off, info, size]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn words(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// strings: "\0color\0RED\0BLUE\0big\0HUGE\0"
    fn sample() -> Vec<u8> {
        let strings = b"\0color\0RED\0BLUE\0big\0HUGE\0";
        let mut t = Vec::new();
        t.extend(type_rec(0, 1, 0, false, 4)); // INT
        t.extend(words(&[0x0100_0020]));
        t.extend(type_rec(1, KIND_ENUM, 2, true, 4));
        t.extend(words(&[7, 3, 11, 0xffff_ffff]));
        t.extend(type_rec(0, 4, 1, false, 8)); // STRUCT with one member
        t.extend(words(&[0, 1, 0]));
        t.extend(type_rec(16, KIND_ENUM64, 1, false, 8));
        t.extend(words(&[20, 0x2, 0x1]));
        blob(&t, strings)
    }

    #[test]
    fn reads_enums_and_enum64() {
        let data = sample();
        let btf = Btf::parse(&data).unwrap();
        let enums = btf.enums().unwrap();
        assert_eq!(enums.len(), 2);
        assert_eq!(enums[0].name, "color");
        assert_eq!(enums[0].members, vec![("RED", 3), ("BLUE", u64::MAX)]);
        assert_eq!(enums[1].name, "big");
        assert_eq!(enums[1].members, vec![("HUGE", 0x1_0000_0002)]);
        assert!(find_enum(&enums, "big").is_some());
        assert!(find_enum(&enums, "nope").is_none());
    }

    #[test]
    fn split_btf_strings_continue_after_base() {
        let base_data = blob(&[], b"\0base\0");
        let base = Btf::parse(&base_data).unwrap();
        // Module strings start at offset 6 (base length): "\0mod\0X\0" → 7 = "mod", 11 = "X"
        let mut t = type_rec(7, KIND_ENUM, 1, false, 4);
        t.extend(words(&[11, 5]));
        let data = blob(&t, b"\0mod\0X\0");
        let m = Btf::parse_split(&data, Some(&base)).unwrap();
        let enums = m.enums().unwrap();
        assert_eq!(enums[0].name, "mod");
        assert_eq!(enums[0].members, vec![("X", 5)]);
        // An offset inside the base resolves there.
        assert_eq!(m.string(1).unwrap(), "base");
    }

    #[test]
    fn malformed_is_an_error() {
        assert!(Btf::parse(&[]).is_err());
        assert!(Btf::parse(&[0x9f, 0xeb]).is_err(), "wrong byte order");
        let data = sample();
        // Truncated anywhere: parse or enums() fails, never panics.
        for cut in 0..data.len() {
            let r = Btf::parse(&data[..cut]).and_then(|b| b.enums());
            assert!(r.is_err(), "cut at {cut} parsed");
        }
        // Unknown kind.
        let bad = blob(&type_rec(0, 31, 0, false, 0), b"\0");
        let e = Btf::parse(&bad).unwrap().enums().unwrap_err();
        assert!(e.msg.contains("unknown BTF kind 31"), "{e}");
        // Name offset past the strings.
        let mut t = type_rec(99, KIND_ENUM, 0, false, 4);
        t.extend(words(&[]));
        let e = Btf::parse(&blob(&t, b"\0")).unwrap().enums().unwrap_err();
        assert!(e.msg.contains("past string section"), "{e}");
        // Unterminated / non-UTF-8 strings.
        let t = type_rec(1, KIND_ENUM, 0, false, 4);
        assert!(Btf::parse(&blob(&t, b"\0abc")).unwrap().enums().is_err());
        assert!(Btf::parse(&blob(&t, b"\0\xff\0")).unwrap().enums().is_err());
        // Header length too small, sections overflowing.
        let mut h = sample();
        h[4..8].copy_from_slice(&8u32.to_le_bytes());
        assert!(Btf::parse(&h).is_err());
        let mut h = sample();
        h[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Btf::parse(&h).is_err());
    }

    #[test]
    fn running_kernel_has_skb_drop_reason() {
        let data = std::fs::read("/sys/kernel/btf/vmlinux");
        let needs = "/sys/kernel/btf/vmlinux (a kernel with CONFIG_DEBUG_INFO_BTF)";
        if !crate::test_skip::unless_met(data.is_ok(), needs) {
            return;
        }
        let data = data.unwrap();
        let enums = Btf::parse(&data).unwrap().enums().unwrap();
        let reasons = find_enum(&enums, "skb_drop_reason").expect("enum skb_drop_reason");
        assert!(
            reasons
                .members
                .iter()
                .any(|(n, _)| *n == "SKB_DROP_REASON_NO_SOCKET")
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(b) = Btf::parse(&data) {
                let _ = b.enums();
            }
        }

        #[test]
        fn never_panics_on_mutated_sample(pos in 0usize..200, byte in any::<u8>()) {
            let mut data = sample();
            if let Some(b) = data.get_mut(pos) {
                *b = byte;
            }
            if let Ok(b) = Btf::parse(&data) {
                let _ = b.enums();
            }
        }
    }
}
