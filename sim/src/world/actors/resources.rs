//! Exact resource arithmetic for the scheduler: quantities as integer nano-units (no floating
//! point, as `resource.Quantity` compares), and a pod's requests as kube-scheduler reserves them
//! (`k8s.io/component-helpers/resource` `PodRequests`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name → nano-units.
pub type Resources = BTreeMap<String, i128>;

const NANO: i128 = 1_000_000_000;

/// Parses a Kubernetes quantity (`<sign><digits>[.<digits>][suffix]`, suffixes `n u m k M G T P
/// E Ki Mi Gi Ti Pi Ei e<exp>`) into nano-units, rounding up as `ParseQuantity` does.
pub fn parse(text: &str) -> Option<i128> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let mut mantissa: i128 = 0;
    for c in int.chars().chain(frac.chars()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c.to_digit(10)?))?;
    }
    let frac_len = u32::try_from(frac.len()).ok()?;
    // value = mantissa × 10^-frac_len × base^exp; nanos = value × 10^9
    let (mul, div_exp): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, 9),
        "u" => (1, 6),
        "m" => (1, 3),
        "k" => (1, -3),
        "M" => (1, -6),
        "G" => (1, -9),
        "T" => (1, -12),
        "P" => (1, -15),
        "E" => (1, -18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, -s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let div_exp = div_exp
        .checked_add(i32::try_from(frac_len).ok()?)?
        .checked_sub(9)?;
    let mut n = mantissa.checked_mul(mul)?;
    if div_exp <= 0 {
        n = n.checked_mul(10i128.checked_pow(div_exp.unsigned_abs())?)?;
    } else {
        let d = 10i128.checked_pow(div_exp.unsigned_abs())?;
        n = n / d + i128::from(n % d != 0);
    }
    Some(if neg { -n } else { n })
}

fn quantity(q: &Quantity) -> i128 {
    parse(&q.0).unwrap_or(0)
}

/// A resource list in nano-units (unparsable values count as 0).
pub fn list(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), quantity(v)))
        .collect()
}

/// A container's requests, its limits standing in for unset requests (the API's defaulting).
fn container_requests(c: &Container) -> Resources {
    let r = c.resources.as_ref();
    let mut out = list(r.and_then(|r| r.limits.as_ref()));
    out.extend(list(r.and_then(|r| r.requests.as_ref())));
    out
}

pub fn add(into: &mut Resources, other: &Resources) {
    for (k, v) in other {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn max_with(into: &mut Resources, other: &Resources) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

/// What the scheduler reserves for `pod`: app containers summed, sidecars (restartable init
/// containers) added, the max with each regular init container plus the sidecars started before
/// it, plus `overhead`.
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::new();
    };
    let mut reqs = Resources::new();
    for c in &spec.containers {
        add(&mut reqs, &container_requests(c));
    }
    let mut sidecars = Resources::new();
    let mut init_max = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut reqs, &r);
            add(&mut sidecars, &r);
            max_with(&mut init_max, &sidecars);
        } else {
            let mut tmp = r;
            add(&mut tmp, &sidecars);
            max_with(&mut init_max, &tmp);
        }
    }
    max_with(&mut reqs, &init_max);
    add(&mut reqs, &list(spec.overhead.as_ref()));
    reqs
}

/// `1500m`-style rendering for messages (whole units when exact).
pub fn show(nanos: i128) -> String {
    if nanos % NANO == 0 {
        (nanos / NANO).to_string()
    } else if nanos % 1_000_000 == 0 {
        format!("{}m", nanos / 1_000_000)
    } else {
        format!("{nanos}n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_are_exact_nano_units() {
        assert_eq!(parse("1"), Some(NANO));
        assert_eq!(parse("1500m"), Some(1_500_000_000));
        assert_eq!(parse("0.5"), Some(500_000_000));
        assert_eq!(parse("1Gi"), Some((1i128 << 30) * NANO));
        assert_eq!(parse("1k"), Some(1000 * NANO));
        assert_eq!(parse("1e3"), Some(1000 * NANO));
        assert_eq!(parse("1n"), Some(1));
        // finer than a nano rounds up, as ParseQuantity does
        assert_eq!(parse("0.1n"), Some(1));
        assert_eq!(
            parse("9007199254740993"),
            Some(9_007_199_254_740_993 * NANO)
        );
        assert_eq!(parse("1x"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("1.2.3"), None);
    }

    #[test]
    fn pod_requests_follow_resourcehelper() {
        // k8s.io/component-helpers/resource PodRequests: containers summed, sidecars added,
        // max with each init container + sidecars before it, plus overhead
        let pod: Pod = serde_json::from_value(json!({
            "spec": {
                "overhead": {"cpu": "100m"},
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "init", "resources": {"requests": {"cpu": "5", "memory": "1Gi"}}},
                ],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "b", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "8"}}},
                ],
            }
        }))
        .unwrap();
        let r = pod_requests(&pod);
        // app 1 + 2 + sidecar 1 = 4 < init 5 + sidecar 1 = 6; + 100m overhead
        assert_eq!(r["cpu"], 6_100_000_000);
        assert_eq!(r["memory"], (1i128 << 30) * NANO);
        assert_eq!(r["nvidia.com/gpu"], 8 * NANO);
    }
}
