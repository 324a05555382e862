//! Exact Kubernetes quantities and resource vectors.
//!
//! A [`Quantity`] is an integer count of nano-units (`i128`), the finest precision Kubernetes keeps
//! (finer values round up, as `resource.ParseQuantity` does). Parsing follows the apimachinery
//! grammar (`<sign><digits>.<digits><suffix>` with decimal SI, binary SI and `e<exp>` suffixes),
//! and [`Quantity`]'s `Display` prints Kubernetes' canonical form (`1500m`, `1536Mi`, `1k`), keeping
//! the suffix family of the text it came from. Nothing goes through floating point.
//!
//! Why not `kube_quantity`: measured with 0.9.0 here, it parses through `f64`
//! (`9007199254740993` became `9007199254740992`, `123456789012345678` became
//! `123456789012345680`) and rejects `1E` (one exa), which the API server accepts.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

const NANO: i128 = 1_000_000_000;

/// Which suffix family a quantity was written in; output keeps it, as Kubernetes does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// An exact quantity: `nanos` × 10⁻⁹.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error(
        "quantity {0:?} does not match <number><suffix> (suffixes: n u m k M G T P E Ki Mi Gi Ti Pi Ei e<exp>)"
    )]
    Syntax(String),
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// A whole number of units (e.g. CPUs, bytes, GPUs).
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: i128::from(units) * NANO,
            format: Format::DecimalSI,
        }
    }

    /// Thousandths of a unit (`500` → `500m`).
    pub fn from_millis(millis: i64) -> Self {
        Quantity {
            nanos: i128::from(millis) * 1_000_000,
            format: Format::DecimalSI,
        }
    }

    /// Whole units in binary format (bytes: `1073741824` prints `1Gi`).
    pub fn from_bytes(bytes: i64) -> Self {
        Quantity {
            nanos: i128::from(bytes) * NANO,
            format: Format::BinarySI,
        }
    }

    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// Parses a Kubernetes quantity string exactly.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax(text.to_string());
        let overflow = || QuantityError::Overflow(text.to_string());
        let bytes = s.as_bytes();
        let mut i = 0;
        let negative = match bytes[0] {
            b'-' => {
                i = 1;
                true
            }
            b'+' => {
                i = 1;
                false
            }
            _ => false,
        };
        let start = i;
        let (mantissa, frac_digits, i) = mantissa(bytes, start).ok_or_else(overflow)?;
        if !bytes[start..i].iter().any(u8::is_ascii_digit) {
            return Err(syntax());
        }
        let suffix = &s[i..];
        // value = mantissa × 10^(dec_exp) × 1024^(bin_exp)
        let (format, dec_exp, bin_exp) = scale(suffix).ok_or_else(syntax)?;
        let mut value = mantissa;
        for _ in 0..bin_exp {
            value = value.checked_mul(1024).ok_or_else(overflow)?;
        }
        // nanos = value × 10^(dec_exp + 9 − frac_digits), rounding up (away from zero) below nano.
        let shift = dec_exp + 9 - frac_digits;
        let nanos = if shift >= 0 {
            let p = pow10(shift).ok_or_else(overflow)?;
            value.checked_mul(p).ok_or_else(overflow)?
        } else {
            match pow10(-shift) {
                Some(p) => value / p + i128::from(value % p != 0),
                // more than 38 digits below a nano: any non-zero value rounds up to 1n
                None => i128::from(value != 0),
            }
        };
        // Kubernetes caps magnitudes at 2^63-1 of the largest unit; we keep i128 room but refuse
        // values no API server could store.
        if nanos > i128::from(i64::MAX) * NANO {
            return Err(overflow());
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// Multiplies by a pod count.
    pub fn times(self, n: i64) -> Self {
        Quantity {
            nanos: self.nanos * i128::from(n),
            format: self.format,
        }
    }

    /// The canonical Kubernetes quantity.
    pub fn to_k8s(self) -> K8sQuantity {
        K8sQuantity(self.to_string())
    }

    fn with_format_of(self, other: &Quantity) -> Format {
        if self.nanos == 0 {
            other.format
        } else {
            self.format
        }
    }
}

/// The mantissa's digits from `i` (integer part, optional fraction): its value, the digits
/// after the dot, and where it ends; `None` on overflow.
fn mantissa(bytes: &[u8], mut i: usize) -> Option<(i128, i32, usize)> {
    let mut mantissa: i128 = 0;
    let mut frac_digits: i32 = 0;
    let mut seen_dot = false;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(c - b'0')))?;
            if seen_dot {
                frac_digits += 1;
            }
        } else if c == b'.' && !seen_dot {
            seen_dot = true;
        } else {
            break;
        }
        i += 1;
    }
    Some((mantissa, frac_digits, i))
}

/// A suffix's format and scale: (format, power of 10, power of 1024); `None`: not a suffix.
fn scale(suffix: &str) -> Option<(Format, i32, u32)> {
    Some(match suffix {
        "" => (Format::DecimalSI, 0, 0),
        "n" => (Format::DecimalSI, -9, 0),
        "u" => (Format::DecimalSI, -6, 0),
        "m" => (Format::DecimalSI, -3, 0),
        "k" => (Format::DecimalSI, 3, 0),
        "M" => (Format::DecimalSI, 6, 0),
        "G" => (Format::DecimalSI, 9, 0),
        "T" => (Format::DecimalSI, 12, 0),
        "P" => (Format::DecimalSI, 15, 0),
        "E" => (Format::DecimalSI, 18, 0),
        "Ki" => (Format::BinarySI, 0, 1),
        "Mi" => (Format::BinarySI, 0, 2),
        "Gi" => (Format::BinarySI, 0, 3),
        "Ti" => (Format::BinarySI, 0, 4),
        "Pi" => (Format::BinarySI, 0, 5),
        "Ei" => (Format::BinarySI, 0, 6),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            (Format::DecimalExponent, parse_exponent(rest)?, 0)
        }
    })
}

fn parse_exponent(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
        return None;
    }
    s.parse().ok()
}

fn pow10(e: i32) -> Option<i128> {
    if !(0..=38).contains(&e) {
        return None;
    }
    Some(10i128.pow(e as u32))
}

impl TryFrom<&K8sQuantity> for Quantity {
    type Error = QuantityError;
    fn try_from(q: &K8sQuantity) -> Result<Self, Self::Error> {
        Quantity::parse(&q.0)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos + rhs.nanos,
            format: self.with_format_of(&rhs),
        }
    }
}
impl std::ops::AddAssign for Quantity {
    fn add_assign(&mut self, rhs: Quantity) {
        *self = *self + rhs;
    }
}
impl std::ops::Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos - rhs.nanos,
            format: self.with_format_of(&rhs),
        }
    }
}
impl std::ops::SubAssign for Quantity {
    fn sub_assign(&mut self, rhs: Quantity) {
        *self = *self - rhs;
    }
}
impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Quantity {
    /// Kubernetes' canonical form: the largest suffix that keeps the mantissa an integer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n == 0 {
            return f.write_str("0");
        }
        let whole = n % NANO == 0;
        if self.format == Format::BinarySI && whole && (n / NANO).abs() >= 1024 {
            let mut units = n / NANO;
            let mut k = 0;
            while k < 6 && units % 1024 == 0 {
                units /= 1024;
                k += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k];
            return write!(f, "{units}{suffix}");
        }
        // decimal: exponent e (multiple of 3, −9..=18) as large as keeps an integer mantissa
        let mut e = -9i32;
        let mut mantissa = n;
        while e < 18 && mantissa % 1000 == 0 {
            mantissa /= 1000;
            e += 3;
        }
        if self.format == Format::DecimalExponent {
            return if e == 0 {
                write!(f, "{mantissa}")
            } else {
                write!(f, "{mantissa}e{e}")
            };
        }
        let suffix = match e {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        };
        write!(f, "{mantissa}{suffix}")
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A resource vector: resource name → exact quantity. Missing names are zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Resources(BTreeMap<String, Quantity>);

impl Resources {
    pub fn new() -> Self {
        Resources(BTreeMap::new())
    }

    pub fn get(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or(Quantity::ZERO)
    }

    pub fn set(&mut self, name: impl Into<String>, q: Quantity) {
        self.0.insert(name.into(), q);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Quantity)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when every entry is zero.
    pub fn is_zero(&self) -> bool {
        self.0.values().all(Quantity::is_zero)
    }

    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(Quantity::ZERO);
            *e += *v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(Quantity::ZERO);
            *e -= *v;
        }
    }

    /// Entry-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(Quantity::ZERO);
            if *v > *e {
                *e = Quantity {
                    nanos: v.nanos,
                    format: e.with_format_of(v),
                };
            }
        }
    }

    /// Every entry multiplied by `n` (pods of one shape).
    pub fn times(&self, n: i64) -> Resources {
        Resources(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.times(n)))
                .collect(),
        )
    }

    /// Entries clamped at zero from below.
    pub fn clamp_non_negative(&self) -> Resources {
        Resources(
            self.0
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if v.is_negative() {
                            Quantity {
                                nanos: 0,
                                format: v.format,
                            }
                        } else {
                            *v
                        },
                    )
                })
                .collect(),
        )
    }

    /// True when no entry exceeds the same entry of `limit`.
    pub fn fits_within(&self, limit: &Resources) -> bool {
        self.0.iter().all(|(k, v)| *v <= limit.get(k))
    }

    /// Kubernetes `ResourceList` with canonical quantities.
    pub fn to_k8s(&self) -> BTreeMap<String, K8sQuantity> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.to_k8s()))
            .collect()
    }

    /// Parses a Kubernetes `ResourceList`, reporting the first bad entry's name.
    pub fn from_k8s(
        list: &BTreeMap<String, K8sQuantity>,
    ) -> Result<Resources, (String, QuantityError)> {
        let mut out = Resources::new();
        for (k, v) in list {
            out.set(
                k.clone(),
                Quantity::try_from(v).map_err(|e| (k.clone(), e))?,
            );
        }
        Ok(out)
    }
}

impl FromIterator<(String, Quantity)> for Resources {
    fn from_iter<I: IntoIterator<Item = (String, Quantity)>>(iter: I) -> Self {
        Resources(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_every_suffix_family_exactly() {
        assert_eq!(q("0.5").nanos(), 500_000_000);
        assert_eq!(q("500m"), q("0.5"));
        assert_eq!(q("1Gi").nanos(), 1_073_741_824 * NANO);
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1E"), q("1000P"));
        assert_eq!(q("1E3"), q("1000"));
        assert_eq!(q("2.5e-3"), q("2500u"));
        assert_eq!(q(".5"), q("0.5"));
        assert_eq!(q("5."), q("5"));
        assert_eq!(q("+3"), q("3"));
        assert_eq!(q("-3").nanos(), -3 * NANO);
        assert_eq!(q("9007199254740993").nanos(), 9_007_199_254_740_993 * NANO);
        assert_eq!(q("123456789012345678").to_string(), "123456789012345678");
    }

    #[test]
    fn rounds_up_below_a_nano_as_kubernetes_does() {
        assert_eq!(q("0.1n").nanos(), 1);
        assert_eq!(q("1.0000000001").nanos(), NANO + 1);
        assert_eq!(q("1e-12").nanos(), 1);
        assert_eq!(q("-0.1n").nanos(), -1);
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "", "abc", "1.2.3", "1Kb", "1ki", "m", "1e", "1e1.5", "--1", "1 Gi", "1e99999",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn prints_kubernetes_canonical_form() {
        assert_eq!(q("1.5").to_string(), "1500m");
        assert_eq!(q("1.5Gi").to_string(), "1536Mi");
        assert_eq!(q("1000").to_string(), "1k");
        assert_eq!(q("512Mi").to_string(), "512Mi");
        assert_eq!(q("1025Ki").to_string(), "1025Ki");
        assert_eq!(q("0.5Ki").to_string(), "512");
        assert_eq!(q("1e3").to_string(), "1e3");
        assert_eq!(q("100m").to_string(), "100m");
        assert_eq!(q("0").to_string(), "0");
        assert_eq!(q("-1500m").to_string(), "-1500m");
    }

    #[test]
    fn sums_keep_the_first_non_zero_format() {
        assert_eq!((q("1Gi") + q("1Gi")).to_string(), "2Gi");
        assert_eq!((Quantity::ZERO + q("1Gi")).to_string(), "1Gi");
        assert_eq!((q("0.1") + q("0.2")), q("0.3"));
        assert_eq!((q("500m") + q("1")).to_string(), "1500m");
    }

    #[test]
    fn resource_vectors_add_subtract_and_compare() {
        let mut a: Resources = [
            ("cpu".to_string(), q("1")),
            ("memory".to_string(), q("1Gi")),
        ]
        .into_iter()
        .collect();
        let b: Resources = [
            ("cpu".to_string(), q("500m")),
            ("nvidia.com/gpu".to_string(), q("1")),
        ]
        .into_iter()
        .collect();
        a.add(&b);
        assert_eq!(a.get("cpu"), q("1500m"));
        assert_eq!(a.get("nvidia.com/gpu"), q("1"));
        assert!(b.fits_within(&a));
        assert!(!a.fits_within(&b));
        a.sub(&b);
        assert_eq!(a.get("cpu"), q("1"));
        assert!(a.get("nvidia.com/gpu").is_zero());
        assert_eq!(a.times(3).get("memory").to_string(), "3Gi");
    }

    proptest! {
        #[test]
        fn canonical_text_parses_back_to_the_same_value(nanos in -(1i128 << 90)..(1i128 << 90), f in 0u8..3) {
            let format = [Format::DecimalSI, Format::BinarySI, Format::DecimalExponent][f as usize];
            let x = Quantity { nanos, format };
            let back = Quantity::parse(&x.to_string()).unwrap();
            prop_assert_eq!(back.nanos(), nanos);
        }

        #[test]
        fn decimal_text_is_exact(int in 0u64..u64::MAX / 2, frac in 0u32..1_000_000_000) {
            let text = format!("{int}.{frac:09}");
            let parsed = Quantity::parse(&text).unwrap();
            prop_assert_eq!(parsed.nanos(), i128::from(int) * NANO + i128::from(frac));
        }
    }
}
