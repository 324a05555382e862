//! Go's `time.ParseDuration` strings (`30s`, `1h30m`, `1.5h`, `0`), as KubeRay's annotations and
//! raygate's own specs take them: parsed by `kube::core::Duration`, with the two cases it lets
//! through refused (an empty string, which it reads as zero, and a negative duration).

use std::time::Duration;

/// A Go duration string that is not empty and not negative.
pub fn parse_go(value: &str) -> Result<Duration, String> {
    if value.is_empty() {
        return Err("is empty: give a duration like 30s, 5m or 1h30m".into());
    }
    let parsed: kube::core::Duration = value
        .parse()
        .map_err(|e| format!("{value:?} is not a duration like 30s, 5m or 1h30m ({e})"))?;
    if parsed.is_negative() {
        return Err(format!("{value:?} is negative"));
    }
    Ok(Duration::from(parsed))
}

/// KubeRay v1.7's `getInitializingTimeout` (the RayService annotation
/// `ray.io/initializing-timeout`): a Go duration (`time.ParseDuration`: `90s`, `1h30m`, `1.5h`), else
/// whole seconds (`strconv.Atoi`). Negative or unparsable: none.
pub fn kuberay_timeout(s: &str) -> Option<Duration> {
    parse_go(s).ok().or_else(|| {
        s.parse::<i64>()
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::{kuberay_timeout, parse_go};

    #[test]
    fn go_durations_parse_and_empty_or_negative_ones_are_refused() {
        let ok = [
            ("0", 0),
            ("30s", 30_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("1500ms", 1_500),
            ("+2m", 120_000),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_go(s).map(|d| d.as_millis()), Ok(ms), "{s}");
        }
        for s in ["", "-5m", "5x", "m", "1.2.3s", "30", "30 s"] {
            assert!(parse_go(s).is_err(), "{s}");
        }
        assert_eq!(parse_go("-1s"), Err("\"-1s\" is negative".into()));
    }

    #[test]
    fn timeouts_parse_as_go_durations_or_seconds() {
        let ok = [
            ("90", 90_000),
            ("90s", 90_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("1500ms", 1_500),
            ("0", 0),
            ("+2m", 120_000),
        ];
        for (s, ms) in ok {
            assert_eq!(kuberay_timeout(s).map(|d| d.as_millis()), Some(ms), "{s}");
        }
        for s in ["", "-5m", "5x", "m", "1.2.3s", "abc", "-3"] {
            assert_eq!(kuberay_timeout(s), None, "{s}");
        }
    }
}
