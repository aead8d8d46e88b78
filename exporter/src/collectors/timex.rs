//! adjtimex(2) → node_exporter's timex collector (collector/timex.go): the
//! kernel's NTP discipline state, `node_timex_*`.
//!
//! Not a file: the collector calls `adjtimex` with `modes = 0` (read only,
//! no privilege needed) at each scrape. What the collector computes from
//! the answer is the pure [`derive`] over a plain [`Raw`] copy of the
//! `struct timex` and the call's return value, so it is unit-tested and
//! property-tested on arbitrary structs without the syscall.
//!
//! The registry's fuzz targets take text and are seeded from a source file,
//! which a syscall does not have. So [`parse_into`] reads a `field=value`
//! text form of [`Raw`] (one field per line, the names of `struct timex`
//! plus `state` for the return value), and `fuzz/src/lib.rs` lists
//! `timex` among its targets that are not a collector's file: the fuzzer
//! drives arbitrary structs through [`derive`] that way, and a crashing
//! input is a readable file. The collector itself never reads that text.
//!
//! `sync_status` is 0 when adjtimex returns `TIME_ERROR` (the clock is not
//! synchronised), else 1. Offsets and jitter are in nanoseconds when
//! `STA_NANO` is set in `status`, else microseconds; frequencies are in
//! ppm with a 16-bit fraction (adjtimex(2) NOTES).

use crate::collectors::{Settings, Spec};
use crate::kernel::error::{CollectError, ParseError, excerpt};
use crate::kernel::parse::{i64_field, lines};
use crate::scrape::collector::Collector;
use crate::scrape::exposition::{Desc, Encoder, Value};

pub const SPEC: Spec = Spec {
    name: "timex",
    default_enabled: true,
    help: "Kernel clock discipline (NTP) state from adjtimex(2)",
    flags: &[],
    build,
    // A syscall, not a file: nothing to corrupt. The fuzz target is the
    // text form, listed in fuzz/src/lib.rs (see the module documentation).
    sources: &[],
    parsers: &[],
};

/// adjtimex's return value when the clock is unsynchronised.
pub const TIME_ERROR: i64 = 5;
/// `status` bit: offsets and jitter are in nanoseconds.
pub const STA_NANO: i64 = 0x2000;
const NANOSECONDS: f64 = 1e9;
const MICROSECONDS: f64 = 1e6;
/// ppm with a 16-bit binary fraction, to a ratio.
const PPM16FRAC: f64 = 1_000_000.0 * 65536.0;

const SYNC_STATUS: Desc = Desc::gauge(
    "node_timex_sync_status",
    "Is clock synchronized to a reliable server (1 = yes, 0 = no).",
);
const OFFSET: Desc = Desc::gauge(
    "node_timex_offset_seconds",
    "Time offset in between local system and reference clock.",
);
const FREQ: Desc = Desc::gauge(
    "node_timex_frequency_adjustment_ratio",
    "Local clock frequency adjustment.",
);
const MAXERROR: Desc = Desc::gauge("node_timex_maxerror_seconds", "Maximum error in seconds.");
const ESTERROR: Desc = Desc::gauge(
    "node_timex_estimated_error_seconds",
    "Estimated error in seconds.",
);
const STATUS: Desc = Desc::gauge("node_timex_status", "Value of the status array bits.");
const CONSTANT: Desc = Desc::gauge(
    "node_timex_loop_time_constant",
    "Phase-locked loop time constant.",
);
const TICK: Desc = Desc::gauge("node_timex_tick_seconds", "Seconds between clock ticks.");
const PPSFREQ: Desc = Desc::gauge(
    "node_timex_pps_frequency_hertz",
    "Pulse per second frequency.",
);
const JITTER: Desc = Desc::gauge("node_timex_pps_jitter_seconds", "Pulse per second jitter.");
const SHIFT: Desc = Desc::gauge(
    "node_timex_pps_shift_seconds",
    "Pulse per second interval duration.",
);
const STABIL: Desc = Desc::gauge(
    "node_timex_pps_stability_hertz",
    "Pulse per second stability, average of recent frequency changes.",
);
const JITCNT: Desc = Desc::counter(
    "node_timex_pps_jitter_total",
    "Pulse per second count of jitter limit exceeded events.",
);
const CALCNT: Desc = Desc::counter(
    "node_timex_pps_calibration_total",
    "Pulse per second count of calibration intervals.",
);
const ERRCNT: Desc = Desc::counter(
    "node_timex_pps_error_total",
    "Pulse per second count of calibration errors.",
);
const STBCNT: Desc = Desc::counter(
    "node_timex_pps_stability_exceeded_total",
    "Pulse per second count of stability limit exceeded events.",
);
const TAI: Desc = Desc::gauge(
    "node_timex_tai_offset_seconds",
    "International Atomic Time (TAI) offset.",
);

/// The fields of `struct timex` the collector uses, widened to i64, and
/// adjtimex's return value (`state`: TIME_OK … TIME_ERROR).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Raw {
    pub state: i64,
    pub offset: i64,
    pub freq: i64,
    pub maxerror: i64,
    pub esterror: i64,
    pub status: i64,
    pub constant: i64,
    pub tick: i64,
    pub ppsfreq: i64,
    pub jitter: i64,
    pub shift: i64,
    pub stabil: i64,
    pub jitcnt: i64,
    pub calcnt: i64,
    pub errcnt: i64,
    pub stbcnt: i64,
    pub tai: i64,
}

/// Field names of the text form, in [`Raw`]'s order.
pub const FIELDS: [&str; 17] = [
    "state", "offset", "freq", "maxerror", "esterror", "status", "constant", "tick", "ppsfreq",
    "jitter", "shift", "stabil", "jitcnt", "calcnt", "errcnt", "stbcnt", "tai",
];

impl Raw {
    fn slot(&mut self, i: usize) -> Option<&mut i64> {
        Some(match i {
            0 => &mut self.state,
            1 => &mut self.offset,
            2 => &mut self.freq,
            3 => &mut self.maxerror,
            4 => &mut self.esterror,
            5 => &mut self.status,
            6 => &mut self.constant,
            7 => &mut self.tick,
            8 => &mut self.ppsfreq,
            9 => &mut self.jitter,
            10 => &mut self.shift,
            11 => &mut self.stabil,
            12 => &mut self.jitcnt,
            13 => &mut self.calcnt,
            14 => &mut self.errcnt,
            15 => &mut self.stbcnt,
            16 => &mut self.tai,
            _ => return None,
        })
    }

    /// The syscall's answer.
    pub fn from_libc(state: libc::c_int, t: &libc::timex) -> Raw {
        #[allow(clippy::unnecessary_cast, reason = "c_long is i32 on 32-bit targets")]
        Raw {
            state: i64::from(state),
            offset: t.offset as i64,
            freq: t.freq as i64,
            maxerror: t.maxerror as i64,
            esterror: t.esterror as i64,
            status: i64::from(t.status),
            constant: t.constant as i64,
            tick: t.tick as i64,
            ppsfreq: t.ppsfreq as i64,
            jitter: t.jitter as i64,
            shift: i64::from(t.shift),
            stabil: t.stabil as i64,
            jitcnt: t.jitcnt as i64,
            calcnt: t.calcnt as i64,
            errcnt: t.errcnt as i64,
            stbcnt: t.stbcnt as i64,
            tai: i64::from(t.tai),
        }
    }
}

/// Every `node_timex_*` sample, in node_exporter's order, from one
/// adjtimex answer: node_exporter's `Update` as a pure function.
pub fn derive(r: &Raw) -> [(&'static Desc, Value); 17] {
    let divisor = if r.status & STA_NANO != 0 {
        NANOSECONDS
    } else {
        MICROSECONDS
    };
    let f = |v: i64| v as f64;
    [
        (&SYNC_STATUS, Value::I64(i64::from(r.state != TIME_ERROR))),
        (&OFFSET, Value::F64(f(r.offset) / divisor)),
        (&FREQ, Value::F64(1.0 + f(r.freq) / PPM16FRAC)),
        (&MAXERROR, Value::F64(f(r.maxerror) / MICROSECONDS)),
        (&ESTERROR, Value::F64(f(r.esterror) / MICROSECONDS)),
        (&STATUS, Value::I64(r.status)),
        (&CONSTANT, Value::I64(r.constant)),
        (&TICK, Value::F64(f(r.tick) / MICROSECONDS)),
        (&PPSFREQ, Value::F64(f(r.ppsfreq) / PPM16FRAC)),
        (&JITTER, Value::F64(f(r.jitter) / divisor)),
        (&SHIFT, Value::I64(r.shift)),
        (&STABIL, Value::F64(f(r.stabil) / PPM16FRAC)),
        (&JITCNT, Value::I64(r.jitcnt)),
        (&CALCNT, Value::I64(r.calcnt)),
        (&ERRCNT, Value::I64(r.errcnt)),
        (&STBCNT, Value::I64(r.stbcnt)),
        (&TAI, Value::I64(r.tai)),
    ]
}

/// The text form of [`Raw`] (fuzzing and tests only): `field=value` lines
/// with the names in [`FIELDS`], each at most once, values signed decimal;
/// a field not given is 0. Blank lines are skipped.
pub fn parse_into(s: &str, out: &mut Raw) -> Result<(), ParseError> {
    *out = Raw::default();
    let mut seen = [false; FIELDS.len()];
    for (i, line) in lines(s).enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| {
            ParseError::new(n, format!("expected field=value, got {}", excerpt(line)))
        })?;
        let at = FIELDS
            .iter()
            .position(|f| *f == key.trim())
            .ok_or_else(|| ParseError::new(n, format!("unknown field {}", excerpt(key))))?;
        if std::mem::replace(&mut seen[at], true) {
            return Err(ParseError::new(n, format!("{} given twice", FIELDS[at])));
        }
        let v = i64_field(value.trim(), n, FIELDS[at])?;
        if let Some(slot) = out.slot(at) {
            *slot = v;
        }
    }
    Ok(())
}

/// The fuzz entry point: the text form through [`derive`], every value
/// touched.
pub fn check(s: &str) -> Result<(), ParseError> {
    let mut raw = Raw::default();
    parse_into(s, &mut raw)?;
    for (_, v) in derive(&raw) {
        std::hint::black_box(v);
    }
    Ok(())
}

/// adjtimex(2) with `modes = 0`: reads the state, changes nothing.
/// `Ok(None)`: not permitted here (a seccomp profile), no series.
fn adjtimex() -> Result<Option<Raw>, CollectError> {
    // SAFETY: timex is plain C data; all-zero (modes = 0) is a valid query.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: adjtimex writes only into the struct we own.
    let state = unsafe { libc::adjtimex(&mut t) };
    if state < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            return Ok(None);
        }
        return Err(CollectError::other("adjtimex(2)", e.to_string()));
    }
    Ok(Some(Raw::from_libc(state, &t)))
}

pub struct TimexCollector;

pub fn build(_: &Settings) -> Box<dyn Collector> {
    Box::new(TimexCollector)
}

impl Collector for TimexCollector {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let Some(raw) = adjtimex()? else {
            return Ok(());
        };
        for (desc, v) in derive(&raw) {
            enc.family(desc);
            enc.sample(desc, &[], v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::test_support::render;
    use proptest::prelude::*;

    fn value(samples: &[(&'static Desc, Value)], name: &str) -> Value {
        samples
            .iter()
            .find(|(d, _)| d.name == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} missing"))
    }

    /// What this VM's kernel answered (no NTP daemon): unsynchronised,
    /// STA_UNSYNC (0x40), 16 s error bounds, a 10 ms tick.
    const UNSYNCED: &str = "state=5\noffset=0\nfreq=0\nmaxerror=16000000\nesterror=16000000\n\
        status=64\nconstant=2\ntick=10000\nppsfreq=0\njitter=0\nshift=0\nstabil=0\n\
        jitcnt=0\ncalcnt=0\nerrcnt=0\nstbcnt=0\ntai=0\n";

    #[test]
    fn derives_node_exporter_values() {
        let mut r = Raw::default();
        parse_into(UNSYNCED, &mut r).unwrap();
        let s = derive(&r);
        assert_eq!(value(&s, "node_timex_sync_status"), Value::I64(0));
        assert_eq!(value(&s, "node_timex_maxerror_seconds"), Value::F64(16.0));
        assert_eq!(value(&s, "node_timex_tick_seconds"), Value::F64(0.01));
        assert_eq!(value(&s, "node_timex_status"), Value::I64(64));
        assert_eq!(
            value(&s, "node_timex_frequency_adjustment_ratio"),
            Value::F64(1.0)
        );

        // chrony-synchronised host: STA_PLL|STA_NANO, offset in ns, freq
        // -12.5 ppm, 37 s TAI.
        let synced = Raw {
            state: 0,
            status: 0x2001,
            offset: -250_000,
            freq: -819_200,
            jitter: 1_500,
            ppsfreq: 65536,
            stabil: 131072,
            tai: 37,
            shift: 4,
            ..Raw::default()
        };
        let s = derive(&synced);
        assert_eq!(value(&s, "node_timex_sync_status"), Value::I64(1));
        assert_eq!(value(&s, "node_timex_offset_seconds"), Value::F64(-0.00025));
        assert_eq!(
            value(&s, "node_timex_frequency_adjustment_ratio"),
            Value::F64(1.0 - 12.5e-6)
        );
        assert_eq!(
            value(&s, "node_timex_pps_jitter_seconds"),
            Value::F64(1.5e-6)
        );
        assert_eq!(
            value(&s, "node_timex_pps_frequency_hertz"),
            Value::F64(1e-6)
        );
        assert_eq!(
            value(&s, "node_timex_pps_stability_hertz"),
            Value::F64(2e-6)
        );
        assert_eq!(value(&s, "node_timex_pps_shift_seconds"), Value::I64(4));
        assert_eq!(value(&s, "node_timex_tai_offset_seconds"), Value::I64(37));
        // Without STA_NANO the same offset is microseconds.
        let micro = Raw {
            status: 0x1,
            ..synced
        };
        assert_eq!(
            value(&derive(&micro), "node_timex_offset_seconds"),
            Value::F64(-0.25)
        );
    }

    #[test]
    fn text_form_is_strict() {
        let parse = |s: &str| {
            let mut r = Raw::default();
            parse_into(s, &mut r).map(|()| r)
        };
        assert_eq!(parse("").unwrap(), Raw::default());
        assert_eq!(parse(" tai = 37 \n\nstate=5\n").unwrap().tai, 37);
        assert_eq!(parse("x=1\n").unwrap_err().line, 1);
        assert!(parse("tai=1\ntai=2\n").unwrap_err().msg.contains("twice"));
        assert!(parse("tick\n").unwrap_err().msg.contains("field=value"));
        assert!(
            parse("tick=9223372036854775808\n")
                .unwrap_err()
                .msg
                .contains("tick")
        );
        assert_eq!(parse("tick=-9223372036854775808\n").unwrap().tick, i64::MIN);
    }

    proptest! {
        /// Any struct the kernel could hand back derives 17 samples with
        /// no panic; the integer families carry the fields unchanged.
        #[test]
        fn any_struct_derives(fields in proptest::array::uniform17(any::<i64>())) {
            let mut r = Raw::default();
            for (i, v) in fields.iter().enumerate() {
                *r.slot(i).unwrap() = *v;
            }
            let s = derive(&r);
            prop_assert_eq!(s.len(), 17);
            prop_assert_eq!(value(&s, "node_timex_status"), Value::I64(r.status));
            prop_assert_eq!(value(&s, "node_timex_tai_offset_seconds"), Value::I64(r.tai));
            for (d, v) in s {
                if let Value::F64(f) = v {
                    prop_assert!(f.is_finite(), "{} = {f}", d.name);
                }
            }
        }
    }

    #[test]
    fn live_syscall_goes_through_derive() {
        let out = render(build(&Settings::with_roots("/proc", "/sys")).as_mut()).unwrap();
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("# TYPE node_timex_"))
                .count(),
            17
        );
        let tick = out
            .lines()
            .find_map(|l| l.strip_prefix("node_timex_tick_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap();
        // USER_HZ 100 → 10 ms; CONFIG_HZ up to 1000 → 1 ms.
        assert!((0.0009..=0.0101).contains(&tick), "{tick}");
    }
}
