//! [`fingerprint_of`]: what tells a retry from a reused key, for a serde payload.

use serde::Serialize;
use serde_json::Value;

use super::DERIVATION;
use crate::Fingerprint;

/// The fingerprint of `payload`: the SHA-256 of its JSON with every object's keys sorted
/// and no whitespace, so that two payloads equal as JSON — a map serialised in another
/// order among them — have one fingerprint.
///
/// ```
/// use std::collections::HashMap;
/// use idem_core::run_once::fingerprint_of;
///
/// let a: HashMap<&str, u32> = [("order", 7), ("cents", 1299)].into();
/// let b: HashMap<&str, u32> = [("cents", 1299), ("order", 7)].into();
/// assert_eq!(fingerprint_of(&a)?, fingerprint_of(&b)?);
/// assert_ne!(fingerprint_of(&a)?, fingerprint_of(&[("order", 7)])?);
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// # Errors
///
/// `payload` cannot be serialised as JSON (a map whose keys are not strings).
pub fn fingerprint_of<P: Serialize + ?Sized>(
    payload: &P,
) -> Result<Fingerprint, serde_json::Error> {
    let mut canonical = Vec::new();
    write_canonical(&serde_json::to_value(payload)?, &mut canonical)?;
    Ok(Fingerprint::of([DERIVATION.as_bytes(), &canonical]))
}

/// `value` as JSON, each object's keys in sorted order (whatever map `Value` was built
/// with: another crate may turn on serde_json's `preserve_order`).
fn write_canonical(value: &Value, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            let mut sorted: Vec<_> = fields.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (name, field)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, name)?;
                out.push(b':');
                write_canonical(field, out)?;
            }
            out.push(b'}');
        }
        scalar => serde_json::to_writer(&mut *out, scalar)?,
    }
    Ok(())
}
