//! A schedule's rule (`Spec`), its zone and misfire policy, and the slots it yields.
//!
//! A spec is stored as text (`cron */5 * * * *`, `every 30s`, `daily 02:30`, `weekly mon@09:00`,
//! `monthly 1@09:00`, `once 2026-03-08T02:30:00Z`) and parsed again by every node, so all nodes
//! compute the same slots. Wall-clock times are read in the schedule's zone with the tz
//! database: a time that a spring-forward gap skips fires at the first instant after the gap,
//! and a time that a fall-back repeats fires at its first occurrence only.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{
    DateTime, Datelike, Days, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc,
    Weekday,
};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use time::OffsetDateTime;

use super::zone::Zone;

/// Why a spec, a zone or a misfire policy was refused. Each message names the flag and the fix.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error(
        "--cron `{expr}` is not a cron expression ({reason}); write five fields (minute hour day month weekday) or six with seconds first, e.g. `*/5 * * * *`"
    )]
    /// `--cron` does not parse.
    Cron {
        /// The expression as given.
        expr: String,
        /// What the cron parser said.
        reason: String,
    },
    #[error(
        "--every `{0}` is not a duration; write a positive number with a unit s, m, h or d, e.g. `30s`, `5m`, `2h`"
    )]
    /// `--every` is not a duration (the text as given).
    Every(String),
    #[error("--daily `{0}` is not a time of day; write HH:MM, e.g. `02:30`")]
    /// `--daily` is not HH:MM (the text as given).
    Daily(String),
    #[error("--weekly `{0}` is not DAY@HH:MM; write a weekday and a time, e.g. `mon@09:00`")]
    /// `--weekly` is not DAY@HH:MM (the text as given).
    Weekly(String),
    #[error(
        "--monthly `{0}` is not N@HH:MM; write a day of the month (1-31) and a time, e.g. `1@09:00`"
    )]
    /// `--monthly` is not N@HH:MM (the text as given).
    Monthly(String),
    #[error(
        "--once `{0}` is not an RFC 3339 time; write e.g. `2026-03-08T09:00:00Z` or `2026-03-08T09:00:00-05:00`"
    )]
    /// `--once` is not an RFC 3339 time (the text as given).
    Once(String),
    #[error(
        "--tz `{0}` is not a time zone of the tz database; write e.g. `UTC`, `Europe/Paris`, `America/New_York`"
    )]
    /// `--tz` is not a zone of the tz database (the name as given).
    Zone(String),
    #[error("--misfire `{0}` is not a misfire policy; write `skip` or `catch_up_once`")]
    /// `--misfire` is not `skip` or `catch_up_once` (the text as given).
    Misfire(String),
    #[error("stored schedule spec `{0}` is not understood")]
    /// A spec read back from the store does not parse (a newer writer, or a hand edit).
    Stored(String),
    #[error(
        "--cron `{0}` matches no date, so it would never fire; check its day-of-month and month \
         fields (February has no 30th or 31st; April, June, September and November no 31st)"
    )]
    /// A cron rule that matches no date (the rule as given).
    NeverMatches(String),
    #[error(
        "--once `{at}` is in the past (it is now {now}), so it would never fire; give a time \
         still to come"
    )]
    /// A `--once` time that has already passed.
    OnceInPast {
        /// The time as given.
        at: String,
        /// The store's clock when it was refused.
        now: String,
    },
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// A cron expression: five fields, or six with seconds first.
    Cron(Box<CronExpr>),
    /// Every this long, at multiples of it since the Unix epoch (so every node agrees).
    Every(Duration),
    /// Every day at this wall-clock time.
    Daily(NaiveTime),
    /// Every week on this day at this wall-clock time.
    Weekly(Weekday, NaiveTime),
    /// Every month on this day (1-31; months without it are skipped) at this wall-clock time.
    Monthly(u32, NaiveTime),
    /// Once, at this instant.
    Once(DateTime<Utc>),
}

/// A parsed cron expression with the text it came from.
#[derive(Debug, Clone)]
pub struct CronExpr {
    text: String,
    cron: Cron,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &CronExpr) -> bool {
        self.text == other.text
    }
}

impl Spec {
    /// `--cron EXPR`.
    pub fn cron(expr: &str) -> Result<Spec, SpecError> {
        let text = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        let fields = text.split(' ').count();
        let refuse = |reason: String| SpecError::Cron {
            expr: expr.to_string(),
            reason,
        };
        if !(5..=6).contains(&fields) {
            return Err(refuse(format!("{fields} fields")));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(&text)
            .map_err(|e| refuse(e.to_string()))?;
        Ok(Spec::Cron(Box::new(CronExpr { text, cron })))
    }

    /// `--every DURATION`: `30s`, `5m`, `2h`, `1d`.
    pub fn every(text: &str) -> Result<Spec, SpecError> {
        let refuse = || SpecError::Every(text.to_string());
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(refuse)?;
        let (n, unit) = t.split_at(split);
        let n: u64 = n.parse().map_err(|_| refuse())?;
        let secs = match unit {
            "s" => n,
            "m" => n.checked_mul(60).ok_or_else(refuse)?,
            "h" => n.checked_mul(3600).ok_or_else(refuse)?,
            "d" => n.checked_mul(86_400).ok_or_else(refuse)?,
            _ => return Err(refuse()),
        };
        if secs == 0 {
            return Err(refuse());
        }
        Ok(Spec::Every(Duration::from_secs(secs)))
    }

    /// `--daily HH:MM`.
    pub fn daily(text: &str) -> Result<Spec, SpecError> {
        let at = hh_mm(text).ok_or_else(|| SpecError::Daily(text.to_string()))?;
        Ok(Spec::Daily(at))
    }

    /// `--weekly DAY@HH:MM`.
    pub fn weekly(text: &str) -> Result<Spec, SpecError> {
        let refuse = || SpecError::Weekly(text.to_string());
        let (day, at) = text.split_once('@').ok_or_else(refuse)?;
        let day = Weekday::from_str(day.trim()).map_err(|_| refuse())?;
        Ok(Spec::Weekly(day, hh_mm(at).ok_or_else(refuse)?))
    }

    /// `--monthly N@HH:MM`.
    pub fn monthly(text: &str) -> Result<Spec, SpecError> {
        let refuse = || SpecError::Monthly(text.to_string());
        let (day, at) = text.split_once('@').ok_or_else(refuse)?;
        let day: u32 = day.trim().parse().map_err(|_| refuse())?;
        if !(1..=31).contains(&day) {
            return Err(refuse());
        }
        Ok(Spec::Monthly(day, hh_mm(at).ok_or_else(refuse)?))
    }

    /// `--once RFC3339`.
    pub fn once(text: &str) -> Result<Spec, SpecError> {
        let at = DateTime::parse_from_rfc3339(text.trim())
            .map_err(|_| SpecError::Once(text.to_string()))?;
        Ok(Spec::Once(at.with_timezone(&Utc)))
    }

    /// Refuses a rule with no slot after `now` in zone `tz`: a `once` in the past, or a cron
    /// expression that matches no date (`0 0 30 2 *`). Stored, either would never fire.
    pub fn check_fires(&self, now: DateTime<Utc>, tz: &Zone) -> Result<(), SpecError> {
        if self.next_after(now, tz).is_some() {
            return Ok(());
        }
        Err(match self {
            Spec::Once(at) => SpecError::OnceInPast {
                at: at.to_rfc3339(),
                now: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            },
            Spec::Cron(expr) => SpecError::NeverMatches(expr.text.clone()),
            other => SpecError::NeverMatches(other.to_string()),
        })
    }

    /// The first slot strictly after `after`, in zone `tz`; `None` when there is none.
    pub fn next_after(&self, after: DateTime<Utc>, tz: &Zone) -> Option<DateTime<Utc>> {
        match self {
            Spec::Cron(expr) => expr
                .cron
                .find_next_occurrence(&after.with_timezone(tz), false)
                .ok()
                .map(|at| at.with_timezone(&Utc)),
            Spec::Every(every) => {
                let step = i64::try_from(every.as_millis()).ok()?;
                let ms = after.timestamp_millis();
                let next = (ms.div_euclid(step) + 1).checked_mul(step)?;
                DateTime::from_timestamp_millis(next)
            }
            Spec::Daily(at) => next_local(after, tz, |_| true, *at),
            Spec::Weekly(day, at) => next_local(after, tz, |d| d.weekday() == *day, *at),
            Spec::Monthly(n, at) => next_local(after, tz, |d| d.day() == *n, *at),
            Spec::Once(at) => (*at > after).then_some(*at),
        }
    }
}

/// The stored form, which [`FromStr`] reads back.
impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Cron(expr) => write!(f, "cron {}", expr.text),
            Spec::Every(every) => write!(f, "every {}s", every.as_secs()),
            Spec::Daily(at) => write!(f, "daily {}", at.format("%H:%M")),
            Spec::Weekly(day, at) => write!(
                f,
                "weekly {}@{}",
                day.to_string().to_lowercase(),
                at.format("%H:%M")
            ),
            Spec::Monthly(n, at) => write!(f, "monthly {n}@{}", at.format("%H:%M")),
            Spec::Once(at) => write!(f, "once {}", at.to_rfc3339()),
        }
    }
}

impl FromStr for Spec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Spec, SpecError> {
        let (kind, rest) = s
            .split_once(' ')
            .ok_or_else(|| SpecError::Stored(s.to_string()))?;
        match kind {
            "cron" => Spec::cron(rest),
            "every" => Spec::every(rest),
            "daily" => Spec::daily(rest),
            "weekly" => Spec::weekly(rest),
            "monthly" => Spec::monthly(rest),
            "once" => Spec::once(rest),
            _ => Err(SpecError::Stored(s.to_string())),
        }
    }
}

/// What to do with slots that passed while no node was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Misfire {
    /// Fire none of them (they are counted as missed).
    #[default]
    Skip,
    /// Fire one job for all of them (they are counted as missed).
    CatchUpOnce,
}

impl Misfire {
    /// The stored and command-line form.
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::CatchUpOnce => "catch_up_once",
        }
    }
}

impl FromStr for Misfire {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Misfire, SpecError> {
        match s {
            "skip" => Ok(Misfire::Skip),
            "catch_up_once" => Ok(Misfire::CatchUpOnce),
            _ => Err(SpecError::Misfire(s.to_string())),
        }
    }
}

/// A zone of the tz database, by name (`UTC`, `Europe/Paris`).
pub fn zone(name: &str) -> Result<Zone, SpecError> {
    Zone::named(name).ok_or_else(|| SpecError::Zone(name.to_string()))
}

pub(crate) fn to_chrono(at: OffsetDateTime) -> DateTime<Utc> {
    let ms = i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}

pub(crate) fn to_time(at: DateTime<Utc>) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(at.timestamp_millis()) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn hh_mm(text: &str) -> Option<NaiveTime> {
    NaiveTime::parse_from_str(text.trim(), "%H:%M").ok()
}

/// The first instant strictly after `after` that falls on a local day accepted by `day` at
/// wall-clock time `at` in `tz`. Looks up to 400 local days ahead (enough for any monthly day).
fn next_local(
    after: DateTime<Utc>,
    tz: &Zone,
    day: impl Fn(NaiveDate) -> bool,
    at: NaiveTime,
) -> Option<DateTime<Utc>> {
    let mut date = after
        .with_timezone(tz)
        .date_naive()
        .checked_sub_days(Days::new(1))?;
    for _ in 0..400 {
        if day(date)
            && let Some(slot) = local_instant(tz, date.and_time(at))
            && slot > after
        {
            return Some(slot);
        }
        date = date.checked_add_days(Days::new(1))?;
    }
    None
}

/// The instant of a wall-clock time: its first occurrence when a fall-back repeats it, and the
/// first valid instant after the gap when a spring-forward skips it.
fn local_instant(tz: &Zone, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(at) => Some(at.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => {
            // Gaps are whole minutes in every zone of the tz database; none is longer than a day.
            let mut probe = local;
            for _ in 0..(24 * 60) {
                probe += chrono::Duration::minutes(1);
                if let LocalResult::Single(at) | LocalResult::Ambiguous(at, _) =
                    tz.from_local_datetime(&probe)
                {
                    return Some(at.with_timezone(&Utc));
                }
            }
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The first `n` slots after `from`.
    fn slots(spec: &Spec, tz: &str, from: &str, n: usize) -> Vec<String> {
        let tz = zone(tz).unwrap();
        let mut at = utc(from);
        let mut out = Vec::new();
        for _ in 0..n {
            match spec.next_after(at, &tz) {
                Some(next) => {
                    out.push(next.to_rfc3339());
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn cron_with_and_without_seconds() {
        assert_eq!(
            slots(
                &Spec::cron("*/2 * * * * *").unwrap(),
                "UTC",
                "2026-01-01T00:00:00Z",
                3
            ),
            [
                "2026-01-01T00:00:02+00:00",
                "2026-01-01T00:00:04+00:00",
                "2026-01-01T00:00:06+00:00"
            ]
        );
        assert_eq!(
            slots(
                &Spec::cron("30 9 * * 1").unwrap(),
                "Europe/Paris",
                "2026-01-01T00:00:00Z",
                2
            ),
            ["2026-01-05T08:30:00+00:00", "2026-01-12T08:30:00+00:00"]
        );
    }

    #[test]
    fn every_is_aligned_to_the_epoch() {
        assert_eq!(
            slots(
                &Spec::every("5m").unwrap(),
                "UTC",
                "2026-01-01T00:01:00Z",
                2
            ),
            ["2026-01-01T00:05:00+00:00", "2026-01-01T00:10:00+00:00"]
        );
        assert_eq!(
            Spec::every("2h").unwrap(),
            Spec::Every(Duration::from_secs(7200))
        );
        assert_eq!(
            Spec::every("30s").unwrap(),
            Spec::Every(Duration::from_secs(30))
        );
    }

    #[test]
    fn daily_weekly_monthly_once() {
        assert_eq!(
            slots(
                &Spec::daily("09:15").unwrap(),
                "Asia/Tokyo",
                "2026-01-01T00:00:00Z",
                2
            ),
            ["2026-01-01T00:15:00+00:00", "2026-01-02T00:15:00+00:00"]
        );
        assert_eq!(
            slots(
                &Spec::weekly("fri@18:00").unwrap(),
                "UTC",
                "2026-01-01T00:00:00Z",
                2
            ),
            ["2026-01-02T18:00:00+00:00", "2026-01-09T18:00:00+00:00"]
        );
        // Months without a 31st are skipped.
        assert_eq!(
            slots(
                &Spec::monthly("31@00:00").unwrap(),
                "UTC",
                "2026-01-01T00:00:00Z",
                2
            ),
            ["2026-01-31T00:00:00+00:00", "2026-03-31T00:00:00+00:00"]
        );
        assert_eq!(
            slots(
                &Spec::once("2026-03-08T09:00:00-05:00").unwrap(),
                "UTC",
                "2026-01-01T00:00:00Z",
                3
            ),
            ["2026-03-08T14:00:00+00:00"]
        );
    }

    #[test]
    fn spring_forward_fires_once_after_the_gap() {
        // 2026-03-08: New York clocks jump from 02:00 EST to 03:00 EDT.
        assert_eq!(
            slots(
                &Spec::daily("02:30").unwrap(),
                "America/New_York",
                "2026-03-07T00:00:00Z",
                3
            ),
            [
                "2026-03-07T07:30:00+00:00", // 02:30 EST
                "2026-03-08T07:00:00+00:00", // 03:00 EDT, the first instant after the gap
                "2026-03-09T06:30:00+00:00", // 02:30 EDT
            ]
        );
    }

    #[test]
    fn fall_back_fires_once_at_the_first_occurrence() {
        // 2026-11-01: New York clocks fall back from 02:00 EDT to 01:00 EST; 01:30 happens twice.
        assert_eq!(
            slots(
                &Spec::daily("01:30").unwrap(),
                "America/New_York",
                "2026-10-31T00:00:00Z",
                3
            ),
            [
                "2026-10-31T05:30:00+00:00", // 01:30 EDT
                "2026-11-01T05:30:00+00:00", // 01:30 EDT, the first of the two
                "2026-11-02T06:30:00+00:00", // 01:30 EST
            ]
        );
    }

    #[test]
    fn stored_form_round_trips() {
        for spec in [
            Spec::cron("*/2 * * * * *").unwrap(),
            Spec::every("5m").unwrap(),
            Spec::daily("02:30").unwrap(),
            Spec::weekly("Mon@09:00").unwrap(),
            Spec::monthly("1@09:00").unwrap(),
            Spec::once("2026-03-08T09:00:00Z").unwrap(),
        ] {
            assert_eq!(spec.to_string().parse::<Spec>().unwrap(), spec);
        }
    }

    #[test]
    fn bad_specs_name_the_flag_and_the_fix() {
        assert_eq!(
            Spec::every("5 minutes").unwrap_err().to_string(),
            "--every `5 minutes` is not a duration; write a positive number with a unit s, m, h or d, e.g. `30s`, `5m`, `2h`"
        );
        assert!(
            Spec::cron("* * *")
                .unwrap_err()
                .to_string()
                .starts_with("--cron `* * *`")
        );
        assert!(Spec::cron("61 * * * *").is_err());
        assert!(Spec::daily("25:00").is_err());
        assert!(Spec::weekly("funday@09:00").is_err());
        assert!(Spec::monthly("32@09:00").is_err());
        assert!(Spec::once("tomorrow").is_err());
        assert!(zone("Mars/Olympus").is_err());
        assert!("sometimes".parse::<Misfire>().is_err());
    }

    mod properties {
        use chrono::{Datelike, NaiveTime, TimeDelta, Timelike};
        use proptest::prelude::*;

        use super::super::*;

        fn time() -> impl Strategy<Value = NaiveTime> {
            (0u32..24, 0u32..60).prop_map(|(h, m)| NaiveTime::from_hms_opt(h, m, 0).unwrap())
        }

        fn weekday() -> impl Strategy<Value = Weekday> {
            (0u8..7).prop_map(|d| Weekday::try_from(d).unwrap())
        }

        /// Every kind of rule but cron (whose text round-trips as written).
        fn spec() -> impl Strategy<Value = Spec> {
            prop_oneof![
                (1u64..10_000_000).prop_map(|s| Spec::Every(Duration::from_secs(s))),
                time().prop_map(Spec::Daily),
                (weekday(), time()).prop_map(|(d, t)| Spec::Weekly(d, t)),
                (1u32..=31, time()).prop_map(|(n, t)| Spec::Monthly(n, t)),
                (0i64..4_000_000_000)
                    .prop_map(|s| Spec::Once(DateTime::from_timestamp(s, 0).unwrap())),
            ]
        }

        fn zone_name() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "UTC",
                "Europe/Paris",
                "America/New_York",
                "Asia/Tokyo",
                "Australia/Lord_Howe",
                "Asia/Kathmandu",
            ])
        }

        proptest! {
            #[test]
            fn a_stored_rule_reads_back_as_itself(spec in spec()) {
                let stored = spec.to_string();
                prop_assert_eq!(stored.parse::<Spec>().unwrap(), spec);
            }

            #[test]
            fn the_parsers_refuse_garbage_without_panicking(text in "\\PC{0,40}") {
                let _ = text.parse::<Spec>();
                let _ = Spec::every(&text);
                let _ = Spec::daily(&text);
                let _ = Spec::weekly(&text);
                let _ = Spec::monthly(&text);
                let _ = Spec::once(&text);
                let _ = Spec::cron(&text);
            }

            /// The next slot is after the instant asked about, at the rule's wall-clock time
            /// (when that time exists that day), and no slot lies between.
            #[test]
            fn the_next_slot_is_the_first_one_after(
                spec in spec(),
                after in 0i64..3_000_000_000,
                tz in zone_name(),
            ) {
                let zone = zone(tz).unwrap();
                let after = DateTime::from_timestamp(after, 0).unwrap();
                let Some(next) = spec.next_after(after, &zone) else {
                    prop_assert!(matches!(spec, Spec::Once(at) if at <= after));
                    return Ok(());
                };
                prop_assert!(next > after);
                let local = next.with_timezone(&zone);
                match &spec {
                    Spec::Daily(at) | Spec::Weekly(_, at) | Spec::Monthly(_, at) => {
                        // A time a DST gap skips fires at the first instant after the gap.
                        if local.time() != *at {
                            let before = (next - TimeDelta::minutes(1)).with_timezone(&zone);
                            prop_assert!(before.time() < *at || before.date_naive() != local.date_naive(),
                                "{spec} fired at {local}");
                        }
                        prop_assert_eq!(local.second(), 0);
                    }
                    Spec::Every(every) => {
                        prop_assert_eq!(next.timestamp() % every.as_secs() as i64, 0);
                    }
                    Spec::Once(at) => prop_assert_eq!(next, *at),
                    Spec::Cron(_) => {}
                }
                match &spec {
                    Spec::Weekly(day, _) => prop_assert_eq!(local.weekday(), *day),
                    Spec::Monthly(n, _) => prop_assert_eq!(local.day(), *n),
                    _ => {}
                }
                // Nothing between: the slot before `next`, asked from just before it, is `next`.
                let just_before = next - TimeDelta::seconds(1);
                if just_before > after {
                    prop_assert_eq!(spec.next_after(just_before, &zone), Some(next));
                }
            }
        }
    }
}
