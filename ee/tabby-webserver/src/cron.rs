//! Six-field cron expressions (`sec min hour day-of-month month day-of-week`, UTC), the format
//! upstream's schedules are written in: `*`, numbers, lists (`1,5`), ranges (`1-5`) and steps
//! (`*/10`, `0-30/5`). Day of week 0 or 7 is Sunday.

use chrono::{DateTime, Datelike, Duration, DurationRound, TimeZone, Timelike, Utc};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Field {
    allowed: Vec<bool>,
}

impl Field {
    fn parse(text: &str, min: u32, max: u32) -> Result<Self, String> {
        let mut allowed = vec![false; max as usize + 1];
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => (
                    range,
                    step.parse::<u32>()
                        .ok()
                        .filter(|s| *s > 0)
                        .ok_or_else(|| format!("bad step in {part:?}"))?,
                ),
                None => (part, 1),
            };
            let (low, high) = if range == "*" {
                (min, max)
            } else if let Some((a, b)) = range.split_once('-') {
                (
                    a.parse().map_err(|_| format!("bad number in {part:?}"))?,
                    b.parse().map_err(|_| format!("bad number in {part:?}"))?,
                )
            } else {
                let n: u32 = range
                    .parse()
                    .map_err(|_| format!("bad number in {part:?}"))?;
                (n, if part.contains('/') { max } else { n })
            };
            if low < min || high > max || low > high {
                return Err(format!("{part:?} is outside {min}-{max}"));
            }
            let mut n = low;
            while n <= high {
                allowed[n as usize] = true;
                n += step;
            }
        }
        Ok(Self { allowed })
    }

    fn matches(&self, value: u32) -> bool {
        self.allowed.get(value as usize).copied().unwrap_or(false)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    second: Field,
    minute: Field,
    hour: Field,
    day: Field,
    month: Field,
    weekday: Field,
}

impl Cron {
    pub fn parse(expression: &str) -> Result<Self, String> {
        let parts: Vec<&str> = expression.split_whitespace().collect();
        let [second, minute, hour, day, month, weekday] = parts.as_slice() else {
            return Err(format!("{expression:?} does not have 6 fields"));
        };
        let mut weekday = Field::parse(weekday, 0, 7)?;
        if weekday.allowed[7] {
            weekday.allowed[0] = true;
        }
        Ok(Self {
            second: Field::parse(second, 0, 59)?,
            minute: Field::parse(minute, 0, 59)?,
            hour: Field::parse(hour, 0, 23)?,
            day: Field::parse(day, 1, 31)?,
            month: Field::parse(month, 1, 12)?,
            weekday,
        })
    }

    /// The first matching time strictly after `after` (`None` if there is none within 5 years).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut t = after.duration_trunc(Duration::seconds(1)).ok()? + Duration::seconds(1);
        let limit = after + Duration::days(5 * 366);
        while t <= limit {
            if !self.month.matches(t.month()) {
                let (y, m) = if t.month() == 12 {
                    (t.year() + 1, 1)
                } else {
                    (t.year(), t.month() + 1)
                };
                t = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single()?;
            } else if !self.day.matches(t.day())
                || !self.weekday.matches(t.weekday().num_days_from_sunday())
            {
                t = (t + Duration::days(1))
                    .duration_trunc(Duration::days(1))
                    .ok()?;
            } else if !self.hour.matches(t.hour()) {
                t = (t + Duration::hours(1))
                    .duration_trunc(Duration::hours(1))
                    .ok()?;
            } else if !self.minute.matches(t.minute()) {
                t = (t + Duration::minutes(1))
                    .duration_trunc(Duration::minutes(1))
                    .ok()?;
            } else if !self.second.matches(t.second()) {
                t += Duration::seconds(1);
            } else {
                return Some(t);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn upstream_schedules() {
        let hourly = Cron::parse("0 0 * * * *").unwrap();
        assert_eq!(
            hourly.next_after(at("2026-11-30T17:42:10Z")),
            Some(at("2026-11-30T18:00:00Z"))
        );
        assert_eq!(
            hourly.next_after(at("2026-11-30T18:00:00Z")),
            Some(at("2026-11-30T19:00:00Z"))
        );
        let daily = Cron::parse("0 0 0 * * *").unwrap();
        assert_eq!(
            daily.next_after(at("2026-12-31T23:59:59Z")),
            Some(at("2027-01-01T00:00:00Z"))
        );
        let ten = Cron::parse("*/10 * * * * *").unwrap();
        assert_eq!(
            ten.next_after(at("2026-11-30T17:42:10Z")),
            Some(at("2026-11-30T17:42:20Z"))
        );
        assert_eq!(
            ten.next_after(at("2026-11-30T17:42:59.5Z")),
            Some(at("2026-11-30T17:43:00Z"))
        );
    }

    #[test]
    fn lists_ranges_weekdays_and_errors() {
        // 09:30 on weekdays.
        let cron = Cron::parse("0 30 9 * * 1-5").unwrap();
        // 2026-11-28 is a Saturday.
        assert_eq!(
            cron.next_after(at("2026-11-28T10:00:00Z")),
            Some(at("2026-11-30T09:30:00Z"))
        );
        let sunday = Cron::parse("0 0 12 * * 7").unwrap();
        assert_eq!(
            sunday.next_after(at("2026-11-30T00:00:00Z")),
            Some(at("2026-12-06T12:00:00Z"))
        );
        let feb30 = Cron::parse("0 0 0 30 2 *").unwrap();
        assert_eq!(feb30.next_after(at("2026-01-01T00:00:00Z")), None);
        for bad in [
            "",
            "* * * * *",
            "60 * * * * *",
            "*/0 * * * * *",
            "a * * * * *",
            "5-1 * * * * *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }
}
