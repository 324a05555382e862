//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as
//! client-go's typed clients send them for built-in kinds (kubectl's `create namespace`, the
//! evictions of `kubectl drain`, controller-runtime's clients), read into the JSON the handlers
//! take. The envelope is `k8s\0` then a `runtime.Unknown` (`apimachinery/pkg/runtime/
//! generated.proto`: `typeMeta` 1, `raw` 2); `raw` is the object's message. Only the messages
//! below are known, with the field numbers of their `generated.proto`; any other kind is the
//! server's 415, which names it. Responses are always JSON: client-go's protobuf clients accept
//! `application/json` too.

use serde_json::{Map, Value, json};

/// The envelope's magic prefix (`runtime/serializer/protobuf`'s `protoEncodingPrefix`).
const MAGIC: &[u8] = b"k8s\0";

/// How one field of a message reads into JSON.
#[derive(Clone, Copy)]
enum Field {
    Str(&'static str),
    Int(&'static str),
    Bool(&'static str),
    Strs(&'static str),
    StrMap(&'static str),
    Time(&'static str),
    MicroTime(&'static str),
    Msg(&'static str, &'static [(u32, Field)]),
    Msgs(&'static str, &'static [(u32, Field)]),
}

use Field::*;

/// `meta/v1` `OwnerReference`.
const OWNER_REFERENCE: &[(u32, Field)] = &[
    (1, Str("kind")),
    (3, Str("name")),
    (4, Str("uid")),
    (5, Str("apiVersion")),
    (6, Bool("controller")),
    (7, Bool("blockOwnerDeletion")),
];

/// `meta/v1` `ObjectMeta` (without `managedFields`, which a client does not send).
const OBJECT_META: &[(u32, Field)] = &[
    (1, Str("name")),
    (2, Str("generateName")),
    (3, Str("namespace")),
    (5, Str("uid")),
    (6, Str("resourceVersion")),
    (7, Int("generation")),
    (8, Time("creationTimestamp")),
    (9, Time("deletionTimestamp")),
    (10, Int("deletionGracePeriodSeconds")),
    (11, StrMap("labels")),
    (12, StrMap("annotations")),
    (13, Msgs("ownerReferences", OWNER_REFERENCE)),
    (14, Strs("finalizers")),
];

const PRECONDITIONS: &[(u32, Field)] = &[(1, Str("uid")), (2, Str("resourceVersion"))];

/// `meta/v1` `DeleteOptions`.
const DELETE_OPTIONS: &[(u32, Field)] = &[
    (1, Int("gracePeriodSeconds")),
    (2, Msg("preconditions", PRECONDITIONS)),
    (3, Bool("orphanDependents")),
    (4, Str("propagationPolicy")),
    (5, Strs("dryRun")),
];

/// `core/v1` `Namespace` (`spec.finalizers`; a client sends no status).
const NAMESPACE: &[(u32, Field)] = &[
    (1, Msg("metadata", OBJECT_META)),
    (2, Msg("spec", &[(1, Strs("finalizers"))])),
];

/// `policy/v1` `Eviction`.
const EVICTION: &[(u32, Field)] = &[
    (1, Msg("metadata", OBJECT_META)),
    (2, Msg("deleteOptions", DELETE_OPTIONS)),
];

/// `core/v1` `ObjectReference`.
const OBJECT_REFERENCE: &[(u32, Field)] = &[
    (1, Str("kind")),
    (2, Str("namespace")),
    (3, Str("name")),
    (4, Str("uid")),
    (5, Str("apiVersion")),
    (6, Str("resourceVersion")),
    (7, Str("fieldPath")),
];

const EVENT_SERIES: &[(u32, Field)] = &[(1, Int("count")), (2, MicroTime("lastObservedTime"))];

/// `events.k8s.io/v1` `Event` (what client-go's `tools/events` recorder writes).
const EVENT: &[(u32, Field)] = &[
    (1, Msg("metadata", OBJECT_META)),
    (2, MicroTime("eventTime")),
    (3, Msg("series", EVENT_SERIES)),
    (4, Str("reportingController")),
    (5, Str("reportingInstance")),
    (6, Str("action")),
    (7, Str("reason")),
    (8, Msg("regarding", OBJECT_REFERENCE)),
    (9, Msg("related", OBJECT_REFERENCE)),
    (10, Str("note")),
    (11, Str("type")),
    (
        12,
        Msg(
            "deprecatedSource",
            &[(1, Str("component")), (2, Str("host"))],
        ),
    ),
    (13, Time("deprecatedFirstTimestamp")),
    (14, Time("deprecatedLastTimestamp")),
    (15, Int("deprecatedCount")),
];

/// `core/v1` `Event` (what client-go's `tools/record` recorder writes).
const CORE_EVENT: &[(u32, Field)] = &[
    (1, Msg("metadata", OBJECT_META)),
    (2, Msg("involvedObject", OBJECT_REFERENCE)),
    (3, Str("reason")),
    (4, Str("message")),
    (5, Msg("source", &[(1, Str("component")), (2, Str("host"))])),
    (6, Time("firstTimestamp")),
    (7, Time("lastTimestamp")),
    (8, Int("count")),
    (9, Str("type")),
    (10, MicroTime("eventTime")),
    (11, Msg("series", EVENT_SERIES)),
    (12, Str("action")),
    (13, Msg("related", OBJECT_REFERENCE)),
    (14, Str("reportingComponent")),
    (15, Str("reportingInstance")),
];

/// The message of `apiVersion`/`kind`, when known.
fn message_of(api_version: &str, kind: &str) -> Option<&'static [(u32, Field)]> {
    match (api_version, kind) {
        ("v1", "Namespace") => Some(NAMESPACE),
        ("policy/v1", "Eviction") => Some(EVICTION),
        ("events.k8s.io/v1", "Event") => Some(EVENT),
        ("v1", "Event") => Some(CORE_EVENT),
        ("meta.k8s.io/v1" | "v1", "DeleteOptions") => Some(DELETE_OPTIONS),
        _ => None,
    }
}

/// Why a protobuf body could not be read.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DecodeError {
    #[error("the body is not a Kubernetes protobuf envelope (no k8s\\0 prefix)")]
    NoEnvelope,
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    #[error("the simulated cluster reads no protobuf {kind} ({api_version}): send it as JSON")]
    Unknown { api_version: String, kind: String },
}

/// The JSON object of a protobuf request body.
pub fn to_json(body: &[u8]) -> Result<Value, DecodeError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(DecodeError::NoEnvelope)?;
    let mut type_meta = (String::new(), String::new());
    let mut raw: &[u8] = &[];
    for (n, v) in fields(envelope)? {
        match (n, v) {
            (1, Wire::Bytes(b)) => {
                for (m, tv) in fields(b)? {
                    match (m, tv) {
                        (1, Wire::Bytes(s)) => type_meta.0 = utf8(s)?,
                        (2, Wire::Bytes(s)) => type_meta.1 = utf8(s)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let (api_version, kind) = type_meta;
    let Some(message) = message_of(&api_version, &kind) else {
        return Err(DecodeError::Unknown { api_version, kind });
    };
    let mut obj = read(raw, message)?;
    if let Value::Object(m) = &mut obj {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    Ok(obj)
}

/// One field's value on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf
            .split_first()
            .ok_or(DecodeError::Malformed("truncated varint"))?;
        *buf = rest;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(DecodeError::Malformed("varint longer than 10 bytes"))
}

/// A message's fields in order (fixed-width fields skipped: none of the known messages has one).
fn fields(mut buf: &[u8]) -> Result<Vec<(u32, Wire<'_>)>, DecodeError> {
    let mut out = vec![];
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let number = u32::try_from(key >> 3).map_err(|_| DecodeError::Malformed("field number"))?;
        match key & 7 {
            0 => out.push((number, Wire::Varint(varint(&mut buf)?))),
            2 => {
                let len = usize::try_from(varint(&mut buf)?)
                    .map_err(|_| DecodeError::Malformed("length"))?;
                if len > buf.len() {
                    return Err(DecodeError::Malformed("truncated field"));
                }
                let (b, rest) = buf.split_at(len);
                out.push((number, Wire::Bytes(b)));
                buf = rest;
            }
            1 => {
                buf = buf
                    .get(8..)
                    .ok_or(DecodeError::Malformed("truncated fixed64"))?
            }
            5 => {
                buf = buf
                    .get(4..)
                    .ok_or(DecodeError::Malformed("truncated fixed32"))?
            }
            _ => return Err(DecodeError::Malformed("unknown wire type")),
        }
    }
    Ok(out)
}

fn utf8(b: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Malformed("string not UTF-8"))
}

/// A message into a JSON object by its field table; unknown fields are skipped.
fn read(buf: &[u8], table: &[(u32, Field)]) -> Result<Value, DecodeError> {
    let mut obj = Map::new();
    for (n, wire) in fields(buf)? {
        let Some((_, field)) = table.iter().find(|(m, _)| *m == n) else {
            continue;
        };
        // Go's encoding omits a zero scalar and a zero time as its JSON does (`omitempty`)
        match (*field, wire) {
            (Str(_), Wire::Bytes([])) | (Int(_) | Bool(_), Wire::Varint(0)) => {}
            (Time(_) | MicroTime(_), Wire::Bytes([])) => {}
            (MicroTime(name), Wire::Bytes(b)) => {
                obj.insert(name.into(), json!(micro_time(b)?));
            }
            (Str(name), Wire::Bytes(b)) => {
                obj.insert(name.into(), json!(utf8(b)?));
            }
            (Int(name), Wire::Varint(v)) => {
                // int64 as two's complement
                obj.insert(name.into(), json!(v as i64));
            }
            (Bool(name), Wire::Varint(_)) => {
                obj.insert(name.into(), json!(true));
            }
            (Strs(name), Wire::Bytes(b)) => push(&mut obj, name, json!(utf8(b)?)),
            (Msgs(name, t), Wire::Bytes(b)) => push(&mut obj, name, read(b, t)?),
            (Msg(name, t), Wire::Bytes(b)) => {
                obj.insert(name.into(), read(b, t)?);
            }
            (StrMap(name), Wire::Bytes(b)) => {
                let entry = read(b, &[(1, Str("key")), (2, Str("value"))])?;
                let key = entry["key"].as_str().unwrap_or_default().to_string();
                let value = entry.get("value").cloned().unwrap_or(json!(""));
                let map = obj.entry(name).or_insert_with(|| json!({}));
                if let Value::Object(m) = map {
                    m.insert(key, value);
                }
            }
            (Time(name), Wire::Bytes(b)) => {
                let t = read(b, &[(1, Int("seconds"))])?;
                let secs = t["seconds"].as_i64().unwrap_or(0);
                let ts = k8s_openapi::jiff::Timestamp::from_second(secs)
                    .map_err(|_| DecodeError::Malformed("time out of range"))?;
                obj.insert(name.into(), json!(crate::clock::seconds(ts)));
            }
            _ => return Err(DecodeError::Malformed("field of an unexpected wire type")),
        }
    }
    Ok(Value::Object(obj))
}

/// A `MicroTime` as its JSON: RFC 3339 with six fractional digits (`metav1.RFC3339Micro`).
fn micro_time(b: &[u8]) -> Result<String, DecodeError> {
    let t = read(b, &[(1, Int("seconds")), (2, Int("nanos"))])?;
    let secs = t["seconds"].as_i64().unwrap_or(0);
    let nanos = t["nanos"].as_i64().unwrap_or(0);
    let ts = k8s_openapi::jiff::Timestamp::from_second(secs)
        .map_err(|_| DecodeError::Malformed("time out of range"))?;
    let whole = crate::clock::seconds(ts);
    let micros = nanos.clamp(0, 999_999_999) / 1000;
    Ok(format!("{}.{micros:06}Z", whole.trim_end_matches('Z')))
}

fn push(obj: &mut Map<String, Value>, name: &str, v: Value) {
    if let Value::Array(a) = obj.entry(name).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32, wire: u8) -> Vec<u8> {
        let mut out = vec![];
        let mut v = u64::from(n) << 3 | u64::from(wire);
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    /// A length-delimited field (every length in these tests is under 128: one byte).
    fn bytes(n: u32, b: &[u8]) -> Vec<u8> {
        let mut out = key(n, 2);
        out.push(u8::try_from(b.len()).unwrap());
        out.extend_from_slice(b);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = bytes(1, api_version.as_bytes());
        tm.extend(bytes(2, kind.as_bytes()));
        let mut out = MAGIC.to_vec();
        out.extend(bytes(1, &tm));
        out.extend(bytes(2, raw));
        out
    }

    #[test]
    fn kubectl_s_namespace_reads_as_json() {
        // what `kubectl create namespace demo` sends (captured from kubectl v1.32)
        let body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1c\n\x14\n\x04demo\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        assert_eq!(
            to_json(body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}, "spec": {}})
        );
    }

    #[test]
    fn an_eviction_with_delete_options_reads_as_json() {
        let mut meta = bytes(1, b"p0");
        meta.extend(bytes(3, b"ns"));
        let mut labels = bytes(1, b"a");
        labels.extend(bytes(2, b"b"));
        meta.extend(bytes(11, &labels));
        let mut opts = key(1, 0);
        opts.push(30);
        let mut raw = bytes(1, &meta);
        raw.extend(bytes(2, &opts));
        let body = envelope("policy/v1", "Eviction", &raw);
        assert_eq!(
            to_json(&body).unwrap(),
            json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p0", "namespace": "ns", "labels": {"a": "b"}},
                "deleteOptions": {"gracePeriodSeconds": 30}})
        );
    }

    #[test]
    fn an_event_reads_with_its_micro_time_and_reference() {
        let mut t = key(1, 0);
        t.extend([0x80, 0xf2, 0xd6, 0xca, 0x06]); // 1767225600 (2026-01-01T00:00:00Z)
        t.extend(key(2, 0));
        t.extend([0xc0, 0x84, 0x3d]); // 1,000,000 ns
        let mut regarding = bytes(1, b"Workload");
        regarding.extend(bytes(3, b"w1"));
        let mut raw = bytes(1, &bytes(1, b"w1.1"));
        raw.extend(bytes(2, &t));
        raw.extend(bytes(7, b"Pending"));
        raw.extend(bytes(8, &regarding));
        raw.extend(bytes(11, b"Normal"));
        let body = envelope("events.k8s.io/v1", "Event", &raw);
        assert_eq!(
            to_json(&body).unwrap(),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "w1.1"},
                "eventTime": "2026-01-01T00:00:00.001000Z", "reason": "Pending",
                "regarding": {"kind": "Workload", "name": "w1"}, "type": "Normal"})
        );
    }

    #[test]
    fn an_unknown_kind_is_named_and_garbage_is_refused() {
        let body = envelope("apps/v1", "Deployment", &[]);
        assert_eq!(
            to_json(&body),
            Err(DecodeError::Unknown {
                api_version: "apps/v1".into(),
                kind: "Deployment".into()
            })
        );
        assert_eq!(to_json(b"{}"), Err(DecodeError::NoEnvelope));
        assert!(matches!(
            to_json(b"k8s\x00\x0a\x7f"),
            Err(DecodeError::Malformed(_))
        ));
    }
}
