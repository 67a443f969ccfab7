//! The document's form of a bounded duration (`60s`, `14d`): a pattern that
//! accepts exactly the texts `Span::parse` reads within the bounds, so that
//! a client (or a fuzzer) that follows the document is never refused.

use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};

use crate::domain::target::pull;

/// Units and their milliseconds, as `Span::parse` reads them.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// The pattern of the durations from `lo` to `hi` milliseconds.
pub fn pattern(lo: u64, hi: u64) -> String {
    let mut alternatives = Vec::new();
    for (unit, per) in UNITS {
        let first = lo.div_ceil(per);
        let last = (hi / per).min(pull::MAX_SPAN_NUMBER);
        if first <= last {
            alternatives.push(format!("(?:{}){unit}", range(first, last)));
        }
    }
    format!("^(?:{})$", alternatives.join("|"))
}

/// A string schema for the durations from `lo` to `hi` milliseconds, with
/// an example; `nullable` lets `null` stand for "absent".
pub fn schema(lo: u64, hi: u64, example: &str, nullable: bool) -> ObjectBuilder {
    let ty = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::new(Type::String)
    };
    ObjectBuilder::new()
        .schema_type(ty)
        .pattern(Some(pattern(lo, hi)))
        .examples([example])
}

/// A regular expression (an alternation, without anchors) of the whole
/// numbers from `a` to `b`, written without leading zeros.
fn range(a: u64, b: u64) -> String {
    let mut parts = Vec::new();
    let mut start = a;
    for stop in stops(a, b) {
        parts.push(digits_pattern(start, stop));
        start = stop + 1;
    }
    parts.join("|")
}

/// Where `[a, b]` splits into ranges each of which one digit pattern
/// (`1[0-9]{2}`) says exactly.
fn stops(a: u64, b: u64) -> Vec<u64> {
    let mut stops = vec![b];
    let mut nines = 1;
    let mut stop = fill_nines(a, nines);
    while a <= stop && stop < b {
        stops.push(stop);
        nines += 1;
        stop = fill_nines(a, nines);
    }
    let mut zeros = 1;
    let mut stop = fill_zeros(b + 1, zeros).wrapping_sub(1);
    while a < stop && stop <= b {
        stops.push(stop);
        zeros += 1;
        stop = fill_zeros(b + 1, zeros).wrapping_sub(1);
    }
    stops.sort_unstable();
    stops.dedup();
    stops
}

/// `n` with its last `count` digits made 9.
fn fill_nines(n: u64, count: u32) -> u64 {
    let p = 10u64.saturating_pow(count);
    n - n % p + (p - 1)
}

/// `n` with its last `count` digits made 0.
fn fill_zeros(n: u64, count: u32) -> u64 {
    let p = 10u64.saturating_pow(count);
    n - n % p
}

/// The pattern of `[start, stop]`, two numbers of as many digits that
/// differ only in a run of digits going from all 0 to all 9 at the end
/// (after at most one digit range).
fn digits_pattern(start: u64, stop: u64) -> String {
    let (s, t) = (start.to_string(), stop.to_string());
    let mut out = String::new();
    let mut any = 0;
    for (x, y) in s.chars().zip(t.chars()) {
        if x == y {
            out.push(x);
        } else if x == '0' && y == '9' {
            any += 1;
        } else {
            out.push_str(&format!("[{x}-{y}]"));
        }
    }
    match any {
        0 => out,
        1 => format!("{out}[0-9]"),
        n => format!("{out}[0-9]{{{n}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::target::pull::Span;

    #[test]
    fn a_range_matches_exactly_its_numbers() {
        for (a, b) in [
            (0, 20),
            (1, 43_200),
            (1_000, 43_200_000),
            (60, 20_160),
            (7, 7),
            (0, 0),
            (3, 1_001),
        ] {
            let re = regex::Regex::new(&format!("^(?:{})$", range(a, b))).unwrap();
            for n in (0..=b.saturating_add(50))
                .step_by(((b / 5_000) as usize).max(1))
                .chain([a, b, b + 1, a.saturating_sub(1)])
            {
                assert_eq!(
                    re.is_match(&n.to_string()),
                    (a..=b).contains(&n),
                    "{n} in [{a}, {b}]: {re}"
                );
            }
            assert!(!re.is_match(&format!("0{b}")), "no leading zero");
        }
    }

    #[test]
    fn the_pattern_accepts_what_the_parser_reads_within_the_bounds() {
        let cases = [
            (0, 20_000),
            (1_000, 43_200_000),
            (60_000, 1_209_600_000),
            (0, 43_200_000),
        ];
        let texts = [
            "0s",
            "0ms",
            "0d",
            "1ms",
            "999ms",
            "1000ms",
            "20000ms",
            "20001ms",
            "1s",
            "20s",
            "21s",
            "59s",
            "60s",
            "1m",
            "5m",
            "720m",
            "721m",
            "12h",
            "13h",
            "1d",
            "14d",
            "15d",
            "20160m",
            "20161m",
            "43200s",
            "43201s",
            "1209600s",
            "00s",
            "01s",
            "1.5s",
            "-1s",
            "s",
            "1w",
            "999999999ms",
        ];
        for (lo, hi) in cases {
            let re = regex::Regex::new(&pattern(lo, hi)).unwrap();
            for t in texts {
                let parsed = Span::parse(t).is_some_and(|s| (lo..=hi).contains(&s.ms()));
                assert_eq!(re.is_match(t), parsed, "{t:?} in [{lo}, {hi}] ms: {re}");
            }
        }
    }
}
