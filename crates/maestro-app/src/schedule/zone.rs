//! A schedule's time zone: a zone of the tz database, read from the copy built into the binary
//! (jiff's bundled database), seen by chrono and croner as a [`chrono::TimeZone`].
//!
//! Every node runs the same binary, so every node reads the same rules and computes the same
//! slots, whatever the machine's own `/usr/share/zoneinfo` says. jiff keeps the database as
//! compact TZif data: the rules cost the binary no relocated tables, which every process would
//! otherwise write at start (docs/benchmarks.md, "Footprint of a run").

use std::fmt;
use std::sync::LazyLock;

use chrono::{
    FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Utc,
};
use jiff::tz::{AmbiguousOffset, TimeZoneDatabase};

/// The tz database built into the binary.
static DATABASE: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);

/// A zone of the tz database (`UTC`, `Europe/Paris`), cheap to clone.
#[derive(Clone, Debug)]
pub struct Zone(jiff::tz::TimeZone);

impl Zone {
    /// The zone named `name`, if the database has it.
    pub fn named(name: &str) -> Option<Zone> {
        DATABASE.get(name).ok().map(Zone)
    }

    /// The database's own spelling of the zone's name (`America/New_York` for
    /// `america/new_york`), which is what a schedule stores.
    pub fn name(&self) -> Option<&str> {
        self.0.iana_name()
    }

    fn offset(&self, offset: jiff::tz::Offset) -> ZoneOffset {
        ZoneOffset {
            zone: self.clone(),
            // jiff's offsets are within ±25:59:59, chrono's within ±23:59:59; no zone of the
            // database comes near either.
            fixed: FixedOffset::east_opt(offset.seconds()).unwrap_or_else(|| Utc.fix()),
        }
    }
}

/// The offset from UTC of a zone at one instant; it names its zone, as chrono requires.
#[derive(Clone, Debug)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fixed.fmt(f)
    }
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> LocalResult<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    /// A wall-clock time in a spring-forward gap has no offset (`None`); one a fall-back repeats
    /// has two, the earlier instant's (the offset before the change) first.
    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> LocalResult<ZoneOffset> {
        let Some(civil) = civil(local) else {
            return LocalResult::None;
        };
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => LocalResult::Single(self.offset(offset)),
            AmbiguousOffset::Gap { .. } => LocalResult::None,
            AmbiguousOffset::Fold { before, after } => {
                LocalResult::Ambiguous(self.offset(before), self.offset(after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        let utc = utc.and_utc();
        let subsec = i32::try_from(utc.timestamp_subsec_nanos()).unwrap_or(0);
        let at = jiff::Timestamp::new(utc.timestamp(), subsec).unwrap_or(if utc.timestamp() < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        self.offset(self.0.to_offset(at))
    }
}

/// chrono's wall-clock time as jiff's, when jiff's range (years -9999 to 9999) holds it.
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    use chrono::{Datelike, Timelike};
    let small = |n: u32| i8::try_from(n).ok();
    jiff::civil::DateTime::new(
        i16::try_from(local.year()).ok()?,
        small(local.month())?,
        small(local.day())?,
        small(local.hour())?,
        small(local.minute())?,
        small(local.second())?,
        i32::try_from(local.nanosecond().min(999_999_999)).ok()?,
    )
    .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn local(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M").unwrap()
    }

    #[test]
    fn offsets_follow_the_rules_of_the_zone() {
        let paris = Zone::named("Europe/Paris").unwrap();
        let winter = DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap(); // 2026-01-01
        let summer = DateTime::<Utc>::from_timestamp(1_782_864_000, 0).unwrap(); // 2026-07-01
        assert_eq!(
            winter
                .with_timezone(&paris)
                .offset()
                .fix()
                .local_minus_utc(),
            3_600
        );
        assert_eq!(
            summer
                .with_timezone(&paris)
                .offset()
                .fix()
                .local_minus_utc(),
            7_200
        );
        let kathmandu = Zone::named("Asia/Kathmandu").unwrap();
        assert_eq!(
            winter
                .with_timezone(&kathmandu)
                .offset()
                .fix()
                .local_minus_utc(),
            20_700
        );
    }

    #[test]
    fn a_gap_has_no_instant_and_a_fold_has_two_the_earlier_first() {
        let new_york = Zone::named("America/New_York").unwrap();
        // 2026-03-08 02:30 does not exist; 2026-11-01 01:30 happens twice.
        assert_eq!(
            new_york.from_local_datetime(&local("2026-03-08T02:30")),
            LocalResult::None
        );
        let LocalResult::Ambiguous(first, second) =
            new_york.from_local_datetime(&local("2026-11-01T01:30"))
        else {
            panic!("a fall-back time has two instants");
        };
        assert_eq!(
            first.with_timezone(&Utc).to_rfc3339(),
            "2026-11-01T05:30:00+00:00"
        );
        assert_eq!(
            second.with_timezone(&Utc).to_rfc3339(),
            "2026-11-01T06:30:00+00:00"
        );
        let LocalResult::Single(noon) = new_york.from_local_datetime(&local("2026-11-01T12:00"))
        else {
            panic!("noon is unambiguous");
        };
        assert_eq!(
            noon.with_timezone(&Utc).to_rfc3339(),
            "2026-11-01T17:00:00+00:00"
        );
    }

    #[test]
    fn names_are_matched_without_case_and_unknown_ones_refused() {
        assert!(Zone::named("Mars/Olympus_Mons").is_none());
        assert!(Zone::named("").is_none());
        assert!(Zone::named("UTC").is_some());
        let lower = Zone::named("europe/paris").unwrap();
        assert_eq!(lower.name(), Some("Europe/Paris"));
        let summer = chrono::DateTime::<Utc>::from_timestamp(1_782_864_000, 0).unwrap();
        assert_eq!(
            summer
                .with_timezone(&lower)
                .offset()
                .fix()
                .local_minus_utc(),
            7_200
        );
    }
}
