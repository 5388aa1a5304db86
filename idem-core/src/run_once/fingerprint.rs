//! [`fingerprint_of`]: what tells a retry from a reused key, for a serde payload.

use serde::Serialize;
use serde_json::Value;

use super::DERIVATION;
use crate::Fingerprint;
use crate::payload::PayloadFingerprint;

/// The fingerprint of `payload` as [`RunOnce`](super::RunOnce) takes it by default: the
/// SHA-256 of its JSON with every object's keys sorted and no whitespace
/// ([`PayloadFingerprint::CanonicalJson`]), so that two payloads equal as JSON — a map
/// serialised in another order among them — have one fingerprint.
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
    fingerprint_as(&PayloadFingerprint::CanonicalJson, payload)
}

/// The fingerprint of `payload`, of what `counted` says counts of its JSON.
pub(super) fn fingerprint_as<P: Serialize + ?Sized>(
    counted: &PayloadFingerprint,
    payload: &P,
) -> Result<Fingerprint, serde_json::Error> {
    Ok(fingerprint_of_value(
        counted,
        &serde_json::to_value(payload)?,
    ))
}

/// The fingerprint of a payload already serialised to a JSON `value`.
pub(super) fn fingerprint_of_value(counted: &PayloadFingerprint, value: &Value) -> Fingerprint {
    Fingerprint::of([DERIVATION.as_bytes(), &counted.counted_json(value)])
}
