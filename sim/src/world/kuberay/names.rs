//! Generated names of KubeRay's children (`utils.GenerateRayClusterName`), deterministic on the
//! emulator's clock.

use k8s_openapi::jiff::Timestamp;

/// Characters of `k8s.io/apimachinery/pkg/util/rand.String` (no vowels, no 0/1/3).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `utils.GenerateRayClusterName`: `<rayservice>-<5 random chars>`. The randomness is a hash of
/// the service, the emulator's clock and a sequence number: the same run on the sim's virtual
/// clock names its clusters the same, and two names in one instant differ.
pub fn generate_cluster_name(service: &str, now: Timestamp, seq: u64) -> String {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: deterministic, unlike `RandomState`
    let mut h = std::hash::DefaultHasher::new();
    (service, now.as_nanosecond(), seq).hash(&mut h);
    let mut bits = h.finish();
    let suffix: String = (0..5)
        .map(|_| {
            let c = NAME_ALPHABET[(bits % NAME_ALPHABET.len() as u64) as usize] as char;
            bits /= NAME_ALPHABET.len() as u64;
            c
        })
        .collect();
    format!("{service}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_look_like_kuberay() {
        let t = Timestamp::from_second(1_767_225_600).unwrap();
        let n = generate_cluster_name("svc", t, 1);
        let suffix = n.strip_prefix("svc-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)));
        // deterministic on the same clock, different for the next name in the same instant
        assert_eq!(generate_cluster_name("svc", t, 1), n);
        assert_ne!(generate_cluster_name("svc", t, 2), n);
    }
}
